"""The benchmark's process trainable: a Python step that does nothing, through
the SDK (class API). bench/process_step measures the worker-side round trip
of a step against a raw pipe echo in the same interpreter."""
import ztune


class Noop(ztune.Trainable):
    def setup(self, config):
        pass

    def step(self):
        return {}


if __name__ == "__main__":
    ztune.run(Noop)
