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


def test_a_figure_keeps_the_side_of_its_threshold_and_only_then_gains_decimals():
    assert units.beside(1.503, 2, (1.5,)) == "1.503" and units.beside(1.497, 2, (1.5,)) == "1.497"
    assert units.beside(1.53, 2, (1.5,)) == "1.53" and units.beside(1.5, 2, (1.5,)) == "1.50"
    assert units.beside(3.46, 0, (4,)) == "3" and units.beside(3.6, 0, (4,)) == "3.6"
    assert units.percent(0.7496, (0.75,)) == "74.96%" and units.percent(0.7496) == "75%"
    assert units.percent(0.81, (0.75,)) == "81%"
    # a small rate against a far larger roof is not "0%" (a CPU's matmul against an A100's)
    assert units.percent(177e9 / 312e12) == "0.057%" and units.percent(0.0) == "0%"
    assert "69.8% of" in units.fraction_of(0.698e12, 1e12, "B/s", "copy", thresholds=(0.7,))


def test_a_ratio_stays_on_its_side_of_each_threshold():
    assert units.ratio(1.234) == "1.23x"
    assert units.ratio(1.497, (1.5,)) == "1.497x"  # not a "1.50x" beside a missed 1.5x
    assert units.ratio(2.996, (3,), decimals=1) == "2.996x"
