"""Answer scoring of the shipped XQuAD tasks: SQuAD v1.1's rules (``evaluate-v1.1.py``),
the protocol XQuAD's README prescribes, whatever the language (embtransfer.evaluation.squad).
The workflow's runner replaces this with the protocol the config names
(``evaluation.scoring.xquad``); this is what plain lm-eval runs of these configs use."""

from embtransfer.evaluation.squad import SQUAD_V1, process_results_for

# SQuAD v1.1 ignores the answer language; "en" only satisfies the signature.
process_results = process_results_for("en", protocol=SQUAD_V1)
