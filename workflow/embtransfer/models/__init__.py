"""The models stage (workflow/rules/models.smk): fetch, load and check models and tokenizers."""
