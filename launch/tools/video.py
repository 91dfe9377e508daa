"""mp4 recording of one episode for launch.enjoy (H.264, yuv420p: plays in browsers and players)."""
from __future__ import annotations

import os

import numpy as np


class Recorder:
    """Records the frames of episode 0 (env.render(), HxWx3 uint8) into an mp4 file."""

    def __init__(self, path: str, fps: float, episode: int = 0):
        try:
            import av
        except ImportError:
            raise ValueError("enjoy.video=true needs PyAV: pip install -e '.[video]'") from None
        self.av, self.path, self.fps, self.episode = av, os.path.abspath(path), fps, episode
        self.container = self.stream = None
        self.frames = 0

    def frame(self, episode: int, env) -> None:
        if episode != self.episode:
            return
        if not hasattr(env, "render"):
            raise ValueError(f"{type(env).__name__} has no render(): this env cannot be recorded")
        img = np.asarray(env.render())
        if self.container is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            h, w = img.shape[:2]
            self.container = self.av.open(self.path, "w")
            from fractions import Fraction
            self.stream = self.container.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1000))
            self.stream.width, self.stream.height = w - w % 2, h - h % 2  # yuv420p needs even sizes
            self.stream.pix_fmt = "yuv420p"
        img = img[: self.stream.height, : self.stream.width]
        for packet in self.stream.encode(self.av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")):
            self.container.mux(packet)
        self.frames += 1

    def close(self) -> None:
        if self.container is not None:
            for packet in self.stream.encode():
                self.container.mux(packet)
            self.container.close()
            self.container = None
