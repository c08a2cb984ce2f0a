"""`python -m snapview ...` runs the bundled binary, exactly as `snapview ...` does."""

from snapview._binary import main

if __name__ == "__main__":
    main()
