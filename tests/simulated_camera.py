"""Camera 0 for the tests, simulated where PyAV opens it (this machine has none, and no v4l2loopback).

zoo.sources.Camera(0) opens ``av.open("/dev/video0", format="v4l2")`` on Linux (``av.open("0",
format="avfoundation")`` on macOS). Here that open gives what FFmpeg's camera input gives: raw YUV frames of the
camera's size at its rate, frame k stamped k / rate seconds and there to read k / rate seconds after the opening
(a camera captures whether or not it is read; FFmpeg asks the driver for enough buffers to keep them), then, after
the last, the end of the input, or the error FFmpeg's v4l2 input gives once the camera is unplugged (its read of the
device fails: ENODEV, or EIO for a read under way). Everything above that open (Camera, the pipeline, the writers,
the CLI) runs as it does with a camera. Any other camera opened (another device, another input format, OpenCV's
VideoCapture) is recorded in ``unexpected``, and leaving the with block fails the test.
"""
from __future__ import annotations

import sys
import threading
import time

import av
import pytest

from rtsp_server import moving_picture

# the device each platform's Camera(0) opens, its FFmpeg input format, and the pixel format that input gives
DEVICES = {"linux": ("/dev/video0", "v4l2", "yuyv422"), "darwin": ("0", "avfoundation", "uyvy422")}
CAMERA_FORMATS = {"v4l2", "video4linux2", "avfoundation", "dshow", "vfwcap"}  # FFmpeg's camera inputs


class CameraFeed:
    """The bytes the camera's input reads: frame k's whole once ``k / fps`` seconds have passed since the opening;
    after the last, none (the end), or ``unplugged`` raised."""

    def __init__(self, frames: list[bytes], fps: int, unplugged: OSError | None = None):
        self.frames, self.fps, self.unplugged = frames, fps, unplugged
        self.opened = time.monotonic()
        self.frame, self.offset = 0, 0  # the next byte to read

    def read(self, size: int) -> bytes:
        if self.frame == len(self.frames):
            if self.unplugged is not None:
                raise self.unplugged
            return b""  # the camera is gone
        time.sleep(max(0.0, self.opened + self.frame / self.fps - time.monotonic()))
        data = self.frames[self.frame][self.offset:self.offset + size]
        self.offset += len(data)
        if self.offset == len(self.frames[self.frame]):
            self.frame, self.offset = self.frame + 1, 0
        return data


class SimulatedCamera:
    """Camera 0 giving ``frames`` frames of ``size`` at ``fps`` after each opening, frame k rtsp_server's
    moving_picture(k) (no two alike under 32 frames), then ending, or unplugged: its read then raises ``unplugged``
    (an OSError of errno ENODEV or EIO, as FFmpeg's v4l2 input's); ``opened`` counts the openings."""

    def __init__(self, frames: int = 30, fps: int = 10, size: tuple[int, int] = (640, 480),
                 unplugged: OSError | None = None):
        platform = next((p for p in DEVICES if sys.platform.startswith(p)), None)
        assert platform is not None, f"no PyAV camera input on {sys.platform} to simulate"
        self.device, self.input_format, pixel_format = DEVICES[platform]
        self.fps, self.unplugged = fps, unplugged
        self.options = {"video_size": f"{size[0]}x{size[1]}", "pixel_format": pixel_format, "framerate": str(fps)}
        self.raw = [av.VideoFrame.from_ndarray(moving_picture(i, size), format="rgb24").reformat(format=pixel_format)
                    .to_ndarray().tobytes() for i in range(frames)]
        self.opened = 0
        self.unexpected: list[str] = []
        self.lock = threading.Lock()
        self.patches = pytest.MonkeyPatch()

    def open(self, real_open, file, *args, **kwargs):
        """av.open: the camera's device gives its feed, another camera is recorded, anything else is opened."""
        wanted = kwargs.get("format")
        if (file, wanted) == (self.device, self.input_format) and not args:
            with self.lock:
                self.opened += 1
            return real_open(CameraFeed(self.raw, self.fps, self.unplugged), format="rawvideo", options=self.options)
        if wanted in CAMERA_FORMATS or str(file).startswith("/dev/video"):
            with self.lock:
                self.unexpected.append(f"av.open({file!r}, *{args!r}, **{kwargs!r})")
        return real_open(file, *args, **kwargs)

    def __enter__(self):
        real_open = av.open
        self.patches.setattr(av, "open", lambda *args, **kwargs: self.open(real_open, *args, **kwargs))
        try:
            import cv2
        except ImportError:
            cv2 = None
        if cv2 is not None:  # Camera's fallback, never reached while PyAV opens the device
            real_capture = cv2.VideoCapture

            def video_capture(*args, **kwargs):
                with self.lock:
                    self.unexpected.append(f"cv2.VideoCapture(*{args!r}, **{kwargs!r})")
                return real_capture(*args, **kwargs)

            self.patches.setattr(cv2, "VideoCapture", video_capture)
        return self

    def __exit__(self, *exc):
        self.patches.undo()
        if exc[0] is None:
            assert not self.unexpected, f"opened other than camera 0 ({self.device}, {self.input_format}): " \
                                        f"{self.unexpected}"
