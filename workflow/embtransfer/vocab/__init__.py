"""The vocab stage (workflow/rules/vocab.smk): canonical token tables and vocabulary overlap."""
