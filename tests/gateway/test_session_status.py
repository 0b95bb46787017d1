"""A capture session's record of its refused turns (``Gateway.status``, and
``GET /sessions/{sid}/status`` over the session API): a prompt over the context length
counts as a context overflow; a backend failure is the last refusal; served turns leave
the record as it was; the trajectory is untouched by either.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from _tiny_lm import answer_text, encode

from ors_gym.gateway import Gateway, GatewayThread
from ors_gym.sampling import VllmCompletions
from tests._token_server import Fail


def test_refused_turns_are_kept_in_the_sessions_status(tok: Any, backend: Any,
                                                       script: Any) -> None:
    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny",
                 context_length=40)
    replies = iter([[*encode(tok, answer_text("Hi.")), tok.eos_token_id],
                    Fail(500, "down for a moment")])
    script.use(lambda ids, text: next(replies))
    with GatewayThread(gw):
        info = gw.open_session()
        client = openai.OpenAI(base_url=info.openai_base_url, api_key=info.api_key,
                               max_retries=0)
        fresh = gw.status(info.id)
        assert (fresh.closed, fresh.turns, fresh.context_overflows, fresh.last_refusal) == (
            False, 0, 0, None)
        client.chat.completions.create(model="tiny", messages=[{"role": "user",
                                                                "content": "Hi."}])
        with pytest.raises(openai.BadRequestError, match="context length"):
            client.chat.completions.create(model="tiny", messages=[
                {"role": "user", "content": "A much longer question, well past the forty "
                                            "tokens this small context allows at all."}])
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="tiny", messages=[{"role": "user",
                                                                    "content": "Again."}])
        assert failed.value.status_code == 502
        status = gw.status(info.id)
        assert (status.turns, status.context_overflows, status.last_refusal) == (1, 1, "502")
        assert gw.trajectory(info.id).turns == 1
        # the same record over the session API
        with httpx.Client(base_url=str(gw.url)) as http:
            got = http.get(f"/sessions/{info.id}/status").json()
            assert got == status.to_dict()
            gw.close_session(info.id)
            assert http.get(f"/sessions/{info.id}/status").json()["closed"] is True
            assert http.get("/sessions/nope/status").status_code == 404
        gw.drop_session(info.id)
