"""An RTSP server of one live H.264 stream, for the tests: what a camera or mediamtx serves, small enough to read.

RTP packets (RFC 6184: one NAL unit a packet, FU-A fragments for larger ones) go interleaved in the RTSP
connection itself (RFC 2326 10.12). FFmpeg's client asks for UDP first and takes TCP after a 461 answer. The
frames are sent in real time from PLAY on; after the last one an RTCP BYE ends the stream, which FFmpeg reads as
the end of the input (a client that has not said TEARDOWN 30 s later is disconnected). Each connection gets the
whole stream from its first frame.
"""
from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from fractions import Fraction

import numpy as np

PAYLOAD_TYPE, CLOCK_HZ, SSRC, MTU = 96, 90000, 0x5A00C0DE, 1400


def moving_picture(i: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``i`` of a moving picture (a gradient and a white block that move), RGB."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x + 8 * i) % 256, y * 255 // height, np.full_like(x, 40 * i % 256)], -1).astype(np.uint8)
    rgb[height // 4:height // 2, (4 * i) % (width // 2):(4 * i) % (width // 2) + width // 4] = 255
    return rgb


def h264_frames(count: int, size: tuple[int, int], fps: int) -> list[list[bytes]]:
    """``count`` frames of a moving picture, each as its H.264 NAL units (no start codes)."""
    import av

    codec = av.CodecContext.create("libx264", "w")
    codec.width, codec.height, codec.pix_fmt = *size, "yuv420p"
    codec.time_base, codec.framerate = Fraction(1, fps), Fraction(fps)
    codec.options = {"preset": "ultrafast", "tune": "zerolatency", "g": "10"}  # no B-frames, a keyframe each second
    units = []
    for i in range(count + 1):
        frame = None
        if i < count:
            frame = av.VideoFrame.from_ndarray(moving_picture(i, size), format="rgb24").reformat(format="yuv420p")
            frame.pts = i
        for packet in codec.encode(frame):
            units.append([unit for unit in split_annex_b(bytes(packet)) if unit])
    assert len(units) == count, f"the encoder gave {len(units)} frames for {count}"
    return units


def split_annex_b(data: bytes) -> list[bytes]:
    """NAL units of an Annex B byte stream (start codes 00 00 01 and 00 00 00 01)."""
    starts, i = [], data.find(b"\0\0\1")
    while i >= 0:
        starts.append(i + 3)
        i = data.find(b"\0\0\1", i + 3)
    return [data[start:(end - 3 if end is not None else None)].rstrip(b"\0")
            for start, end in zip(starts, [*starts[1:], None])]


def rtp_payloads(units: list[bytes]) -> list[tuple[bytes, bool]]:
    """One frame's RTP payloads, each with its marker bit (set on the frame's last packet)."""
    payloads = []
    for unit in units:
        if len(unit) <= MTU:
            payloads.append(unit)
            continue
        indicator, kind, body = unit[0] & 0xE0 | 28, unit[0] & 0x1F, unit[1:]
        chunks = [body[j:j + MTU] for j in range(0, len(body), MTU)]
        payloads += [bytes([indicator, kind | 0x80 * (j == 0) | 0x40 * (j == len(chunks) - 1)]) + chunk
                     for j, chunk in enumerate(chunks)]
    return [(payload, j == len(payloads) - 1) for j, payload in enumerate(payloads)]


def interleaved(channel: int, packet: bytes) -> bytes:
    return b"$" + bytes([channel]) + struct.pack("!H", len(packet)) + packet


class Session(socketserver.StreamRequestHandler):
    server: "RTSPServer"
    timeout = 60  # a client silent this long is left

    def setup(self):
        super().setup()
        self.sending = threading.Lock()  # answers and RTP packets share the socket
        self.torn_down, self.sent_all = threading.Event(), False

    def send(self, data: bytes) -> None:
        with self.sending:
            self.wfile.write(data)
            self.wfile.flush()

    def answer(self, cseq: str, status: str = "200 OK", headers: dict | None = None, body: bytes = b"") -> None:
        lines = [f"RTSP/1.0 {status}", f"CSeq: {cseq}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def handle(self):
        try:
            self.answer_requests()
        except OSError:  # the client left, or was left
            pass

    def answer_requests(self):
        base = f"rtsp://{self.server.host}:{self.server.server_address[1]}{self.server.path}"
        sdp = ("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=zoo test stream\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n"
               f"m=video 0 RTP/AVP {PAYLOAD_TYPE}\r\na=rtpmap:{PAYLOAD_TYPE} H264/{CLOCK_HZ}\r\n"
               f"a=fmtp:{PAYLOAD_TYPE} packetization-mode=1\r\na=control:track0\r\n").encode()
        while True:
            first = self.rfile.read(1)
            if not first:
                return
            if first == b"$":  # the client's RTCP reports, interleaved
                channel_and_length = self.rfile.read(3)
                self.rfile.read(struct.unpack("!H", channel_and_length[1:])[0])
                continue
            lines = [(first + self.rfile.readline()).decode().strip()]
            while lines[-1]:
                lines.append(self.rfile.readline().decode().strip())
            method, url = lines[0].split()[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:-1])}
            self.rfile.read(int(headers.get("content-length", 0)))
            cseq = headers.get("cseq", "0")
            if not url.startswith(base) and url != "*":
                self.answer(cseq, "404 Not Found")
            elif method == "OPTIONS":
                self.answer(cseq, headers={"Public": "OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"})
            elif method == "DESCRIBE":
                self.answer(cseq, headers={"Content-Base": base + "/", "Content-Type": "application/sdp"}, body=sdp)
            elif method == "SETUP" and "RTP/AVP/TCP" not in headers.get("transport", ""):
                self.answer(cseq, "461 Unsupported Transport")
            elif method == "SETUP":
                self.answer(cseq, headers={"Transport": "RTP/AVP/TCP;unicast;interleaved=0-1", "Session": "1"})
            elif method == "PLAY":
                self.answer(cseq, headers={"Session": "1", "Range": "npt=0.000-"})
                threading.Thread(target=self.play, daemon=True).start()
            elif method in ("TEARDOWN", "GET_PARAMETER"):
                self.answer(cseq, headers={"Session": "1"})
                if method == "TEARDOWN":
                    self.server.played += self.sent_all  # every frame sent, and the client left at the end
                    self.torn_down.set()
                    return
            else:
                self.answer(cseq, "405 Method Not Allowed")

    def play(self):
        """The frames in real time, then an RTCP BYE (the end of the stream)."""
        start, sequence = time.monotonic(), 0
        try:
            for i, units in enumerate(self.server.frames):
                time.sleep(max(0.0, start + i / self.server.fps - time.monotonic()))
                timestamp = i * CLOCK_HZ // self.server.fps
                for payload, marker in rtp_payloads(units):
                    header = struct.pack("!BBHII", 0x80, PAYLOAD_TYPE | 0x80 * marker, sequence & 0xFFFF,
                                         timestamp, SSRC)
                    self.send(interleaved(0, header + payload))
                    sequence += 1
            # BYE (RFC 3550 6.6) after an empty receiver report: FFmpeg reads no RTCP packet under 12 bytes
            self.send(interleaved(1, struct.pack("!BBHIBBHI", 0x80, 201, 1, SSRC, 0x81, 203, 1, SSRC)))
            self.sent_all = True
            if not self.torn_down.wait(timeout=30):  # a client that missed the end is not left waiting for ever
                self.request.shutdown(socket.SHUT_RDWR)
        except OSError:  # the client left first
            pass


class RTSPServer(socketserver.ThreadingTCPServer):
    """``rtsp://HOST:PORT/PATH`` serving ``frames`` frames of ``size`` at ``fps``, on a thread of its own; ``played``
    counts the clients that took the whole stream and left at its end (final once the with block is left)."""

    allow_reuse_address = True
    daemon_threads = False  # server_close (on leaving the with block) waits for every client's session

    def __init__(self, host: str = "127.0.0.1", port: int = 0, path: str = "/live", frames: int = 20,
                 size: tuple[int, int] = (96, 64), fps: int = 10):
        self.host, self.path, self.fps, self.played = host, path, fps, 0
        self.frames = h264_frames(frames, size, fps)
        super().__init__((socket.gethostbyname(host), port), Session)

    @property
    def url(self) -> str:
        return f"rtsp://{self.host}:{self.server_address[1]}{self.path}"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
