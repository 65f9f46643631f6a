"""A minimal W3C WebDriver client (stdlib only) for the browser tests: chromedriver plus
headless Chromium, from Debian's `chromium` and `chromium-driver` packages."""

import base64
import json
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
import zlib

HOW_TO = ("needs Chromium and chromedriver: `apt-get install -y chromium chromium-driver` "
          "(Debian/Ubuntu), then `python -m pytest -m browser`")


def find_browser():
    """(chromium, chromedriver) paths, or None when either is missing."""
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                                   "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One headless Chromium session driven through chromedriver's HTTP API."""

    def __init__(self, browser, driver, width=1280, height=1600):
        self.port = _free_port()
        self.proc = subprocess.Popen([driver, f"--port={self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait_ready()
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": browser, "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", f"--window-size={width},{height}"]}}
        value = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = f"/session/{value['sessionId']}"

    def _wait_ready(self):
        for _ in range(300):  # 30 s: a busy CI machine starts it slowly
            try:
                if self._call("GET", "/status")["ready"]:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("chromedriver did not start")

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())["value"]

    def open(self, url):
        self._call("POST", self.session + "/url", {"url": url})

    def run(self, script):
        return self._call("POST", self.session + "/execute/sync",
                          {"script": script, "args": []})

    def console(self):
        """Browser console entries so far: [{'level': 'SEVERE', 'message': ...}, ...]."""
        return self._call("POST", self.session + "/se/log", {"type": "browser"})

    def screenshot(self):
        """The viewport as PNG bytes."""
        return base64.b64decode(self._call("GET", self.session + "/screenshot"))

    def close(self):
        try:
            self._call("DELETE", self.session)
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def png_pixels(png):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) *
                                                          (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def ink(png):
    """(distinct colours, share of non-white pixels) of a screenshot, sampling every 4th
    pixel of every 4th row: how the browser tests tell a drawn page from a blank one."""
    width, height, rows, bpp = png_pixels(png)
    colours, inked = set(), 0
    for row in rows[::4]:
        for x in range(0, width * bpp, bpp * 4):
            px = row[x:x + 3]
            colours.add(px)
            inked += px != b"\xff\xff\xff"
    return len(colours), inked / ((len(rows) // 4 + 1) * (width // 4 + 1))
