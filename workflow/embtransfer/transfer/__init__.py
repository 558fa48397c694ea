"""The transfer stage (workflow/rules/transfer.smk): the methods, SALT's regression, checkpoints."""
