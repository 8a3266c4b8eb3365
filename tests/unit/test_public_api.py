"""The public API is exactly what __all__ says (one line of upkeep, as httpx does)."""

import qualitycheck


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(qualitycheck) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(qualitycheck, n)).__name__ == "module"}
    assert sorted(qualitycheck.__all__) == qualitycheck.__all__
    assert set(qualitycheck.__all__) == public - modules
