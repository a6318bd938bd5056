"""How JSON tool actions read to teammates (comms): short, and never an exception on agent text."""

import pytest

from scenarios.json_action import tool_action_summary


@pytest.mark.parametrize("action,summary", [
    ('{"tool": "post", "args": {"value": "Sun"}}', "post(Sun)"),
    ('{"args": {"origin": "Paris", "destination": "Lima", "day": "Mon"}, "tool": "find_flights"}',
     "find_flights(Paris, Lima, Mon)"),
    ('{"tool": "read_board", "args": {}}', "read_board()"),
    ('{"answer": "BK23"}', "answer(BK23)"),
    ("not json", "invalid action"),
    ('{"answer": 5}', "invalid action"),
    ('{"tool": "post", "args": {"value": ["x"]}}', "invalid action"),
    ('[1, 2]', "invalid action"),
    (None, "invalid action"),
])
def test_tool_action_summary_is_short_and_never_raises(action, summary):
    assert tool_action_summary(action) == summary
