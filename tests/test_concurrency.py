"""One model shared by threads gives the results of sequential calls (zoo.concurrency: a per-model lock)."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import zoo
from zoo.concurrency import lock_of, serialized


def test_four_threads_times_eight_images_equal_sequential_results():
    model = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (48 + 8 * (i % 3), 64, 3), dtype=np.uint8) for i in range(32)]

    def detect(image):
        return model.predict(image, imgsz=64, conf=0.0, max_det=20)[0].boxes.data

    sequential = [detect(image) for image in images]
    assert sum(len(boxes) for boxes in sequential) > 0  # something to compare
    with ThreadPoolExecutor(4) as pool:  # 4 threads x 8 images
        threaded = list(pool.map(detect, images))
    assert all(np.array_equal(a, b) for a, b in zip(sequential, threaded))


def test_calls_on_one_model_never_overlap_and_other_models_are_not_blocked():
    class Model:
        def __init__(self):
            self.inside = self.most = 0

        @serialized()
        def predict(self, seconds):
            self.inside += 1
            self.most = max(self.most, self.inside)
            time.sleep(seconds)  # a window for another thread to enter, were there no lock
            self.inside -= 1
            return threading.get_ident()

    shared, other = Model(), Model()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: shared.predict(0.01), range(16)))
    assert shared.most == 1
    with lock_of(shared):  # another model's calls go on while this one is busy
        assert ThreadPoolExecutor(1).submit(other.predict, 0).result(timeout=5)
    assert lock_of(shared) is lock_of(shared) and lock_of(shared) is not lock_of(other)
