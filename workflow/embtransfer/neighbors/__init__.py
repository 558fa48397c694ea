"""The neighbors stage (workflow/rules/neighbors.smk): sparsemax neighbour sets."""
