"""The suite's own tools: the caplog that stands in for pytest's (its logging plugin is off), and
the source-tree check every end-to-end test runs."""

from __future__ import annotations

import logging
import os

from support import captured_logs, source_digest


def test_caplog_holds_what_is_logged_and_gives_levels_back(caplog):
    # levels set here: an earlier test in this worker may have configured the root logger
    log, other = logging.getLogger("suite.tools"), logging.getLogger("suite.other")
    caplog.set_level(logging.WARNING, logger="suite.tools")
    log.info("not shown: the logger passes warnings only")
    log.warning("a %s", "warning")
    assert caplog.messages == ["a warning"] and "WARNING suite.tools: a warning" in caplog.text
    caplog.set_level(logging.INFO, logger="suite.tools")
    log.info("now shown")
    assert caplog.record_tuples[-1] == ("suite.tools", logging.INFO, "now shown")
    caplog.clear()
    caplog.set_level(logging.INFO, logger="suite.other")
    with caplog.at_level(logging.DEBUG, logger="suite.other"):
        other.debug("inside")
    other.debug("outside")
    assert caplog.messages == ["inside"] and other.level == logging.INFO


def test_the_levels_a_test_sets_are_given_back_after_it():
    root = logging.getLogger()
    before = root.level
    with captured_logs() as logs:
        logs.set_level(logging.DEBUG, logger="suite.back")
        logs.set_level(logging.CRITICAL + 1)
        assert logging.getLogger("suite.back").level == logging.DEBUG
        assert root.level == logging.CRITICAL + 1
    assert logging.getLogger("suite.back").level == logging.NOTSET and root.level == before
    assert logs not in root.handlers


def test_the_source_check_sees_a_new_time_and_leaves_out_pycache_and_dangling_links(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.py").write_text("x = 1\n")
    (tmp_path / "code" / "__pycache__").mkdir()
    (tmp_path / "code" / "dangling").symlink_to(tmp_path / "gone")
    before = source_digest(tmp_path / "code")
    assert list(before) == [str(tmp_path / "code" / "a.py")]
    stat = os.stat(tmp_path / "code" / "a.py")
    os.utime(tmp_path / "code" / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    (tmp_path / "code" / "__pycache__" / "a.pyc").write_bytes(b"ignored")
    after = source_digest(tmp_path / "code")
    assert after.keys() == before.keys() and after != before
