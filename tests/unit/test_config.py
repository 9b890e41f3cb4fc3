from dataclasses import fields

import pytest

from image_classifier.config import TrainConfig, build_parser, parse, parse_config


def test_every_field_is_a_flag():
    flags = {action.dest for action in build_parser()._actions if action.dest != "help"}
    assert flags == {f.name for f in fields(TrainConfig)}


@pytest.mark.parametrize(("text", "expected"), [("True", True), ("False", False),
                                                 ("true", True), ("0", False)])
def test_booleans_accept_azure_spelling(text, expected):
    cfg = parse_config(["--data", "d", "--freeze_backbone", text, "--channels_last", text])
    assert cfg.freeze_backbone is expected and cfg.channels_last == str(expected)


def test_precision_and_channels_last_default_to_auto():
    cfg = parse_config(["--data", "d"])
    assert (cfg.precision, cfg.channels_last) == ("auto", "auto")
    assert parse_config(["--data", "d", "--channels_last"]).channels_last == "True"


def test_bare_boolean_flag_means_true():
    assert parse_config(["--data", "d", "--skip_bad_images"]).skip_bad_images is True


def test_numbers_are_typed_and_defaults_match_the_spec():
    cfg = parse_config(["--data", "d", "--learning_rate", "0.003", "--epochs", "3"])
    assert cfg.learning_rate == 0.003 and cfg.epochs == 3
    assert (cfg.step_size, cfg.gamma, cfg.arch, cfg.image_size) == (7, 0.1, "resnet18", 224)


@pytest.mark.parametrize("argv", [["--precision", "fp8"], ["--epochs", "0"],
                                  ["--freeze_backbone", "maybe"], ["--learning_rate", "-1"],
                                  ["--channels_last", "sometimes"]])
def test_bad_values_exit_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(["--data", "d", *argv])
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_model_dir_defaults_under_output_dir():
    assert parse_config(["--data", "d", "--output_dir", "o"]).resolved_model_dir == "o/model"


def test_help_prints_every_flag_even_where_its_text_holds_a_percent_sign(capsys):
    """argparse %-formats help texts: `--help` crashed on "99%," before they were escaped."""
    with pytest.raises(SystemExit) as done:
        parse(TrainConfig, ["--help"])
    assert done.value.code == 0
    assert ">= 99%, val acc" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("module", ["evaluate", "export", "prep", "register"])
def test_every_steps_help_prints(module, capsys):
    import importlib

    step = importlib.import_module(f"image_classifier.{module}")
    with pytest.raises(SystemExit) as done:
        step.main(["--help"])
    assert done.value.code == 0 and "--" in capsys.readouterr().out
