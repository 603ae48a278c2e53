"""The conformance suite: every test here that reaches the ``engine`` fixture (directly,
or through ``store``) runs on each engine, SQLite and PostgreSQL, by default.

A test opts out explicitly: ``@pytest.mark.one_engine`` when it never reaches
engine code (refused before any transaction, or a pure value), or by taking
``db``, the SQLite file, when it is about that file. ``test_engine_coverage.py``
fails on any other test of this folder that would run on one engine only.

A third engine, written here (``renamed_engine.py``: SQLite with the queue's
tables renamed, its own transactions, found by its URL's scheme), also runs
every test that reaches the engine only through ``store``, except those of
``NOT_ON_THE_THIRD_ENGINE``: an engine queue_core does not ship passes the
suite without the protocol changed.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

from . import renamed_engine
from .coverage import ENGINES, OPT_OUT, SQLITE_FILE, THIRD


def _parametrizes_engine_itself(metafunc: pytest.Metafunc) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        if "engine" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return True
    return False


ANOTHER_PROCESS = "it also runs queue-core in another process, where the third engine is not registered"
# Tests that reach the engine only through their store, and yet do not run on the third
# engine: why, for each (a test missing here fails on the third engine).
NOT_ON_THE_THIRD_ENGINE = {
    "test_handler_shape.py::test_a_handler_of_the_wrong_shape_is_a_usage_error_before_any_claim": ANOTHER_PROCESS,
    "test_handler_shape.py::test_a_long_handler_object_is_accepted_by_the_cli": ANOTHER_PROCESS,
    "test_handler_shape.py::test_work_on_a_queue_of_your_own_needs_a_handler": ANOTHER_PROCESS,
    "test_id_pattern_safety.py::test_queue_core_create_refuses_an_unsafe_pattern": ANOTHER_PROCESS,
    "test_long_handler.py::test_a_killed_worker_s_heartbeat_dies_with_it_and_the_message_is_taken_over": ANOTHER_PROCESS,
    "test_long_handler.py::test_a_long_step_outlives_its_first_lease_in_another_process": ANOTHER_PROCESS,
    "test_long_handler.py::test_a_stopped_worker_loses_its_lease_and_its_result_is_not_written": ANOTHER_PROCESS,
    "test_migration_lines.py::test_a_table_made_before_lines_existed_is_adopted_at_version_1": "it deletes from migration_lines by name",
    "test_named_queues.py::test_the_command_line_creates_lists_and_works_a_queue": ANOTHER_PROCESS,
    "test_retry_policy.py::test_creating_the_default_queue_again_keeps_its_policy": ANOTHER_PROCESS,
    "test_retry_policy.py::test_the_command_line_creates_a_policy_and_lists_it": ANOTHER_PROCESS,
    "test_send_and_manage.py::test_queue_core_list_and_purge": ANOTHER_PROCESS,
    "test_worker_path.py::test_a_worker_killed_between_effect_and_commit_leaves_no_effect": ANOTHER_PROCESS,
    "test_worker_path.py::test_a_worker_killed_inside_a_batch_leaves_no_effect_of_it": ANOTHER_PROCESS,
    "test_worker_service.py::test_a_forever_worker_waits_picks_up_new_work_and_stops_on_sigterm": ANOTHER_PROCESS,
    "test_worker_service.py::test_a_handler_that_raises_is_recorded_and_never_stops_a_forever_worker": ANOTHER_PROCESS,
    "test_worker_service.py::test_a_second_ctrl_c_rolls_back_and_gives_the_lease_back": ANOTHER_PROCESS,
    "test_worker_service.py::test_ctrl_c_stops_after_the_message_in_hand_with_status_130": ANOTHER_PROCESS,
    "test_worker_service.py::test_sigterm_finishes_the_message_in_hand_and_takes_no_new_one": ANOTHER_PROCESS,
    "test_worker_service.py::test_work_runs_your_handler_from_your_module": ANOTHER_PROCESS,
    "test_worker_threads.py::test_sigterm_with_n_threads_finishes_every_message_in_hand": ANOTHER_PROCESS,
    "test_worker_threads.py::test_the_cli_runs_a_two_step_handler_under_its_heartbeat": ANOTHER_PROCESS,
    "test_worker_threads.py::test_two_ctrl_c_with_n_threads_give_every_lease_back": ANOTHER_PROCESS,
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if ("engine" in metafunc.fixturenames and SQLITE_FILE not in metafunc.fixturenames
            and metafunc.definition.get_closest_marker(OPT_OUT) is None
            and not _parametrizes_engine_itself(metafunc)):  # its own list: the guard judges it
        # The third engine (renamed_engine.py) runs where a test reaches an engine only through
        # its store: a test that asks for the engine's name does something of that engine's
        # own beside the store (its driver, its server, a file made by hand).
        asks_name = "engine" in inspect.signature(metafunc.function).parameters
        name = f"{metafunc.definition.path.name}::{metafunc.function.__name__}"
        on_third = ("store" in metafunc.fixturenames and not asks_name
                    and name not in NOT_ON_THE_THIRD_ENGINE)
        third = [THIRD] if on_third else []
        metafunc.parametrize("engine", [*ENGINES, *third], indirect=True)


@pytest.fixture(autouse=True)
def _the_third_engine_really_ran(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test run on the third engine fails unless it opened a store on it."""
    if getattr(getattr(request.node, "callspec", None), "params", {}).get("engine") != THIRD:
        yield
        return
    before = len(renamed_engine.OPENED)
    yield
    assert len(renamed_engine.OPENED) > before, "this test never opened a store on the third engine"
