"""Running servers in a private network namespace, where only the loopback interface exists."""

import shutil
import subprocess


def loopback_only(command):
  """`command` in a new network namespace with only the loopback interface, up."""
  return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def available() -> bool:
  """Whether this process may create such a namespace (`unshare --net` needs root)."""
  return shutil.which("unshare") is not None and subprocess.run(
      loopback_only(["true"]), capture_output=True, check=False).returncode == 0
