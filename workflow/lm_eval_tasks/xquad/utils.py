"""Answer scoring of the shipped XQuAD tasks: MLQA's official normalisation for the
answer's language (embtransfer.evaluation.squad), the same function that scores MLQA."""

from embtransfer.evaluation.squad import process_results_for

process_results_ar = process_results_for("ar")
process_results_de = process_results_for("de")
process_results_el = process_results_for("el")
process_results_en = process_results_for("en")
process_results_es = process_results_for("es")
process_results_hi = process_results_for("hi")
process_results_ro = process_results_for("ro")
process_results_ru = process_results_for("ru")
process_results_th = process_results_for("th")
process_results_tr = process_results_for("tr")
process_results_vi = process_results_for("vi")
process_results_zh = process_results_for("zh")
