# lapt stage (placeholder)


def all_lapt():
    return []
