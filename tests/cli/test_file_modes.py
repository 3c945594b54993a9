"""Files the project writes get the mode a plain open() would give them (0666 less the umask), not mkstemp's 0600
(issue 27): every atomic write goes through simulator.inputs.loading.temp_beside."""

import os
import stat

import matplotlib

matplotlib.use("Agg")


def test_atomic_writes_follow_the_umask(tmp_path):
    import matplotlib.pyplot as plt

    from simulator.inputs.loading import save_figure_atomic, write_atomic

    old = os.umask(0o022)
    try:
        a = write_atomic(tmp_path / "a.md", "x\n")
        fig = plt.figure()
        b = save_figure_atomic(fig, tmp_path / "b.png")
        plt.close(fig)
        assert stat.S_IMODE(a.stat().st_mode) == 0o644 and stat.S_IMODE(b.stat().st_mode) == 0o644
        os.umask(0o077)
        c = write_atomic(tmp_path / "c.md", "x\n")
        assert stat.S_IMODE(c.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
