"""Printed text fits the book's column (brrr.column)."""

from brrr.column import WIDTH, fit


def test_a_long_sentence_wraps_between_words_under_its_indentation():
    sentence = "  " + " ".join(f"word{i}" for i in range(60))
    lines = fit(sentence).splitlines()
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert lines[0].startswith("  word0") and all(line.startswith("    word") for line in lines[1:])
    assert " ".join(" ".join(lines).split()) == " ".join(sentence.split())  # no word lost or split


def test_lines_that_fit_and_unbreakable_words_are_kept():
    text = "short line\n" + "x" * (WIDTH + 20)
    assert fit(text) == text


def test_anything_print_takes_is_fitted_as_its_str():
    class Config:
        def __str__(self):
            return "Config(width=64)"

    assert fit(Config()) == "Config(width=64)"
    assert fit(3) == "3"
