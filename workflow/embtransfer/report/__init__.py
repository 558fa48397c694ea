"""The report: the SALT paper's Tables 1-6, 8 and Figure 2 regenerated from result files.

One module per concern:

* :mod:`.records`: read evaluation JSONs, LAPT metrics files, coverage JSONs and the
  paper's reference CSV; a malformed file raises
  :class:`.records.MalformedResultError` naming it, an absent one is
  reported as missing.
* :mod:`.paper`: which of our settings is the paper's (source model, language,
  target-PLM architecture, method names), from the ``report`` config section.
* :mod:`.tables`: the tables themselves (wide Markdown, long CSV), our numbers
  with the paper's beside them where the setting matches.
* :mod:`.figures`: Figure 2, training-loss curves.
* :mod:`.zeroshot`: the zero-shot comparison table (``results/tables/zeroshot.*``).
* :mod:`.build`: everything at once, as the report rule writes it.
"""
