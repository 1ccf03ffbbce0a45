"""Probe: the CUDA capture id of the current stream through the driver (ctypes), in and out of captures."""
import ctypes, torch
cuda = ctypes.CDLL("libcuda.so.1")
dev = torch.cuda.current_device()
torch.zeros(1, device="cuda")

def info(name):
    fn = getattr(cuda, name, None)
    if fn is None:
        return None
    status, cid = ctypes.c_int(-1), ctypes.c_uint64(0)
    s = ctypes.c_void_p(torch._C._cuda_getCurrentRawStream(dev))
    if name.endswith("_v3"):
        r = fn(s, ctypes.byref(status), ctypes.byref(cid), None, None, None, None)
    elif name.endswith("_v2"):
        r = fn(s, ctypes.byref(status), ctypes.byref(cid), None, None, None)
    else:
        r = fn(s, ctypes.byref(status), ctypes.byref(cid))
    return r, status.value, cid.value

names = ["cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo"]
print("outside", {n: info(n) for n in names})
seen = []
for g in range(2):
    graph = torch.cuda.CUDAGraph()
    x = torch.zeros(4, device="cuda")
    with torch.cuda.graph(graph):
        a = {n: info(n) for n in names}
        x += 1
        b = {n: info(n) for n in names}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            c = {n: info(n) for n in names}
            x += 1
        torch.cuda.current_stream().wait_stream(side)
    print("graph", g, "first", a, "\n   second", b, "\n   side stream", c)
print("has get_currently_capturing_graph", hasattr(torch._C._CUDAGraph, "get_currently_capturing_graph"))
