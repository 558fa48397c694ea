"""The data stage (workflow/rules/data.smk): corpora of every language, and downloads."""
