"""``python -m torch_monarch.demo``: the project's main demonstration."""

from torch_monarch.demo.collectives_tour import main

if __name__ == "__main__":
    main()
