"""The miniature world: languages, facts, corpora, tokenizers and models built from a seed."""
