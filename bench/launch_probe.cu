// How much of a small kernel's time per call is the launch path: back-to-back launches of one
// kernel, as the suite benchmark times them (CUDA events around 100 launches, the median of 7
// batches), launched directly or replayed as a one-kernel CUDA graph, on the legacy default
// stream, a blocking stream and a non-blocking one. Also the host's time to enqueue a launch,
// which bounds the rate when it exceeds the device's time per call.
//
// Kernels: an empty one (one block), a row kernel shaped like the suite's ntrans (8 or 64 blocks
// of 256 threads, each reading three 8 KB fp16 rows and writing one, with two block-wide
// reductions between), and one that spins for 10 or 15 us, longer than the host takes to enqueue
// a call, so that the rest of a call's time is the device's gap between launches.
//
//   nvcc -O3 -arch=sm_90 -o launch_probe bench/launch_probe.cu && ./launch_probe
#include <chrono>
#include <cstdio>
#include <string>

#include "probe_util.cuh"

namespace {

__global__ void empty_kernel() {}

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` nanoseconds and records how long it ran: what a call costs beyond it is the
// launch path's share on the device.
__global__ void spin_kernel(unsigned long long ns, unsigned long long* ran) {
  const unsigned long long t0 = global_ns();
  unsigned long long t = t0;
  while (t - t0 < ns) t = global_ns();
  *ran = t - t0;
}

__device__ float block_sum(float v, float* red) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0;
  for (int w = 0; w < 8; ++w) s += red[w];
  __syncthreads();
  return s;
}

// rms(X + a * (rms(H) + X)) over 4096-wide rows, 16 elements a thread, in registers.
__global__ void __launch_bounds__(256)
    row_kernel(const __half* h, const __half* x, const __half* a, __half* out) {
  __shared__ float red[8];
  const size_t base = size_t(blockIdx.x) * 4096 + threadIdx.x * 8;
  float hv[16], xv[16], av[16];
  for (int p = 0; p < 2; ++p) {
    const size_t at = base + p * 2048;
    widen8(*reinterpret_cast<const uint4*>(h + at), hv + 8 * p);
    widen8(*reinterpret_cast<const uint4*>(x + at), xv + 8 * p);
    widen8(*reinterpret_cast<const uint4*>(a + at), av + 8 * p);
  }
  float s = 0;
  for (float v : hv) s += v * v;
  const float hs = rsqrtf(block_sum(s, red) / 4096 + 1e-6f);
  float r[16];
  s = 0;
  for (int i = 0; i < 16; ++i) {
    r[i] = xv[i] + av[i] * (hv[i] * hs + xv[i]);
    s += r[i] * r[i];
  }
  const float rs = rsqrtf(block_sum(s, red) / 4096 + 1e-6f);
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 8; ++q) out[base + p * 2048 + q] = __float2half(r[8 * p + q] * rs);
}

// Microseconds a call (the median of 7 batches of 100, as time_module does) and the host's
// microseconds to enqueue one.
template <typename Launch>
void measure(const char* what, cudaStream_t stream, Launch launch) {
  for (int i = 0; i < 20; ++i) launch();
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> device, host;
  for (int rep = 0; rep < 7; ++rep) {
    CK(cudaEventRecord(e0, stream));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) launch();
    const auto t1 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    device.push_back(ms * 1000.0 / 100);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
  }
  std::sort(device.begin(), device.end());
  std::sort(host.begin(), host.end());
  std::printf("%-48s %7.2f us a call   host enqueue %5.2f us\n", what, device[3], host[3]);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

template <typename Kernel>
void probe(const std::string& kernel, cudaStream_t stream, const std::string& stream_name,
           Kernel enqueue) {
  measure((kernel + ", direct, " + stream_name).c_str(), stream, [&] { enqueue(stream); });
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStream_t capture;
  CK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
  CK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
  enqueue(capture);
  CK(cudaStreamEndCapture(capture, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  measure((kernel + ", graph, " + stream_name).c_str(), stream,
          [&] { CK(cudaGraphLaunch(exec, stream)); });
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(capture));
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s\n", prop.name);
  const size_t elems = 64 * 4096;
  std::vector<__half> host(elems);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : host) v = __float2half(nd(rng));
  __half *h = upload(host), *x = upload(host), *a = upload(host), *out = upload(host);

  cudaStream_t blocking, non_blocking;
  CK(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault));
  CK(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking));
  const std::pair<cudaStream_t, const char*> streams[] = {
      {cudaStreamLegacy, "legacy default stream"},
      {blocking, "blocking stream"},
      {non_blocking, "non-blocking stream"}};
  for (auto [stream, name] : streams) {
    probe("empty", stream, name, [&](cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); });
    for (int rows : {8, 64})
      probe("rows" + std::to_string(rows), stream, name,
            [&](cudaStream_t s) { row_kernel<<<rows, 256, 0, s>>>(h, x, a, out); });
  }
  // A kernel longer than the host's enqueue time: the device's own gap between calls shows.
  unsigned long long* ran;
  CK(cudaMalloc(&ran, sizeof(*ran)));
  for (unsigned long long us : {10ull, 15ull})
    probe("spin" + std::to_string(us) + "us", non_blocking, "non-blocking stream",
          [&](cudaStream_t s) { spin_kernel<<<1, 32, 0, s>>>(us * 1000, ran); });
  unsigned long long last = 0;
  CK(cudaMemcpy(&last, ran, sizeof(last), cudaMemcpyDeviceToHost));
  std::printf("the last spin ran %.2f us on the device\n", last / 1000.0);
  CK(cudaGetLastError());
  return 0;
}
