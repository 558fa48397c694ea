# evaluate stage (placeholder)


def all_evaluation():
    return []
