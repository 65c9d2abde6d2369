"""`python -m vitx` (also what `accelerate launch -m vitx ...` runs)."""
from .cli import main

if __name__ == "__main__":
    main()
