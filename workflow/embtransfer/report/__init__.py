"""The report: every paired comparison of the run in one table, the findings written from it,
and the SALT paper's tables and Figure 2 regenerated from the result files.

* :mod:`.comparisons`: the spine; the only place a test is decided.
* :mod:`.setting_tables`, :mod:`.tables`, :mod:`.diagnostics`: per-item scores and tests
  handed to it (with the paper's and the diagnostic tables).
* :mod:`.setting_tables`, :mod:`.findings`, :mod:`.figures`: what a reader sees, all read
  from the decided table.
* :mod:`.build`: everything at once, as the report rule writes it.
"""
