"""GnuPG is held to a memory cap: a small key file cannot make it take the controller's memory.

A compressed packet (RFC 4880 section 5.6: tag 8, then the algorithm, 1 ZIP or 2 ZLIB,
then the deflated packets) lets 200 kB stand for hundreds of megabytes of packets.
gpg inflates it and keeps what it reads: on a vendor key followed by ten million
one-byte user IDs it reached 427 MiB and ran until the filter's 60 s deadline. The
filter runs gpg with ``RLIMIT_AS`` at ``GPG_MEMORY_MAX``: gpg stops at once ("out of
core") and the file is refused in one line. The family: a fixed seed picks the
algorithm, the user ID's length and the count (copies of a signature instead cost
gpg time, not memory: the 60 s deadline holds those); each stream goes through the
filter in a child Python whose children's peak memory (gpg's) is measured with
``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.ansible.filter_plugin import load_plugin
from tests.ansible.openpgp_keys import USER_ID, dearmor, header
from tests.fixtures.vendor_keys import VENDOR_KEYS

openpgp = load_plugin("openpgp.py")
REPO = Path(__file__).resolve().parents[2]
COMPRESSED = 8  # RFC 4880 section 4.3: Compressed Data Packet
BUDGET_MIB = 256
CHILD = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from tests.ansible.filter_plugin import load_plugin
result = load_plugin("openpgp.py").FilterModule().filters()["openpgp_pinned_keyring"](
    open(sys.argv[2], "rb").read(), sys.argv[3])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"ok": result["ok"], "problem": result["problem"], "peak_mib": peak}))
"""


def _bomb(key: bytes, seed: int) -> bytes:
    """The key, then many copies of one packet, all inside one compressed packet."""
    rng = random.Random(seed)
    algorithm = rng.choice((1, 2))
    size = rng.randrange(1, 4)
    repeated = header(USER_ID, size, "new") + b"x" * size
    copies = rng.randrange(8_000_000, 12_000_000) // len(repeated) * 10
    packer = zlib.compressobj(9, zlib.DEFLATED, -13 if algorithm == 1 else 15)
    parts = [packer.compress(key)]
    block = repeated * 10_000
    parts += [packer.compress(block) for _ in range(copies // 10_000)]
    inner = bytes([algorithm]) + b"".join(parts) + packer.flush()
    return header(COMPRESSED, len(inner), "new-long") + inner


@pytest.mark.parametrize("seed", range(3))
def test_a_compressed_packet_bomb_is_refused_within_the_memory_budget(tmp_path: Path,
                                                                      seed: int) -> None:
    path = min(VENDOR_KEYS, key=lambda each: each.name)
    fingerprint = VENDOR_KEYS[path][1]
    bomb = tmp_path / "bomb.gpg"
    bomb.write_bytes(_bomb(dearmor(path.read_text()), seed))
    assert bomb.stat().st_size < 1 << 20
    child = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(bomb), fingerprint],
                           capture_output=True, timeout=200, check=False)
    assert child.returncode == 0, child.stderr.decode()[-400:]
    outcome = json.loads(child.stdout)
    print(f"\nseed {seed}: {bomb.stat().st_size} bytes, gpg peak {outcome['peak_mib']:.0f} MiB: "
          f"{outcome['problem']}")
    assert not outcome["ok"] and "MiB for GnuPG" in outcome["problem"]
    assert outcome["peak_mib"] < BUDGET_MIB + 16  # the cap, plus what the kernel counts apart
    assert len(outcome["problem"]) <= 200 and outcome["problem"].isprintable()


def test_a_key_text_is_held_to_its_cap_in_bytes_not_characters() -> None:
    """A str of fewer than 1 MiB characters, each four bytes in UTF-8: 4 MiB for gpg."""
    text = "\U0001f511" * (openpgp.INPUT_MAX_BYTES // 2)
    result = openpgp.FilterModule().filters()["openpgp_pinned_keyring"](text, "0" * 40)
    assert not result["ok"] and "bytes, more than the" in result["problem"]
