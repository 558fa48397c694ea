"""Answer scoring of the shipped XQuAD tasks (see embtransfer.evaluation.squad)."""

from embtransfer.evaluation.squad import score


def process_results(doc, results):
    """EM and F1 (0..1) of the generation against every gold answer, max over them."""
    return score(results[0], doc["answers"]["text"])
