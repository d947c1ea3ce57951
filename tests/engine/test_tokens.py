"""Lease tokens never repeat: within a process, across threads, and in a forked child (which takes a new
random prefix: counting on from its parent's state would hand out the parent's next tokens)."""

from __future__ import annotations

import os
import threading

from queue_max_django.engine.tokens import new_token


def test_tokens_are_sixteen_bytes_and_never_repeat_across_threads() -> None:
    seen: list[bytes] = []

    def take() -> None:
        seen.extend(new_token() for _ in range(5000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 20000
    assert {len(token) for token in seen} == {16}
    assert len(set(seen)) == len(seen)


def test_a_forked_child_hands_out_tokens_its_parent_never_will() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next tokens, to the parent
        try:
            os.write(write_end, b"".join(new_token() for _ in range(100)))
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 4096):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    child = {data[i : i + 16] for i in range(0, len(data), 16)}
    parent = {new_token() for _ in range(100)}
    assert len(child) == 100
    assert not child & parent
    assert {token[:8] for token in child} != {token[:8] for token in parent}
