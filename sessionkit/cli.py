def main(argv=None):  # placeholder until cli lands
    return 0
