"""The fasttext stage (workflow/rules/fasttext.smk): fastText models and per-token vectors."""
