from brrr import units


def test_si_prefixes_and_significant_digits():
    assert units.si(2.5e12, "FLOP/s") == "2.50 TFLOP/s"
    assert units.si(25.3e9, "B/s") == "25.3 GB/s"
    assert units.si(333e9, "FLOP/s") == "333 GFLOP/s"
    assert units.si(8, "B") == "8.00 B"
    assert units.si(0.5, "B") == "0.500 B"


def test_seconds_pick_a_fitting_unit():
    assert units.seconds(2.05) == "2.05 s"
    assert units.seconds(0.0121) == "12.1 ms"
    assert units.seconds(3.4e-6) == "3.40 us"
    assert units.seconds(8.12e-7) == "812 ns"


def test_binary_bytes():
    assert units.binary_bytes(256 * 2**20) == "256 MiB"
    assert units.binary_bytes(1.5 * 2**30) == "1.50 GiB"
    assert units.binary_bytes(100) == "100 B"


def test_fraction_of_names_the_ceiling():
    text = units.fraction_of(1.41e12, 3.0e12, "B/s", "measured copy bandwidth")
    assert text == "1.41 TB/s = 47% of 3.00 TB/s measured copy bandwidth"
