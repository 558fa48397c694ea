"""The lapt stage (workflow/rules/lapt.smk): language-adaptive continual pre-training."""
