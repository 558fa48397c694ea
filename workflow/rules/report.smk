# report stage (placeholder)


def all_report():
    return []
