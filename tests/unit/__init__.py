"""Pure tests: plain Python in this process (`pytest.mark.pure`)."""
