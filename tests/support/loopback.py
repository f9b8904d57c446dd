"""Running servers in a private network namespace, where only the loopback interface exists."""

import shlex
import shutil
import subprocess


def loopback_only(command):
  """`command` in a new network namespace with only the loopback interface, up."""
  return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def concurrently(commands, seconds):
  """One command that runs `commands` side by side, each stopped after `seconds`, and fails if any fails."""
  starts = " ".join(f"timeout {seconds} {shlex.join(command)} & pids=\"$pids $!\";" for command in commands)
  return ["sh", "-c", f"{starts} status=0; for pid in $pids; do wait $pid || status=1; done; exit $status"]


def available() -> bool:
  """Whether this process may create such a namespace (`unshare --net` needs root)."""
  return shutil.which("unshare") is not None and subprocess.run(
      loopback_only(["true"]), capture_output=True, check=False).returncode == 0
