// A probe, not part of the engine: how many thread-block clusters of 1, 2, 4 and 8 blocks the
// device runs at once, for 256-thread blocks with 100, 180 and 222 KB of shared memory (the block
// lowering's streamed kernels take 180-222 KB). The lowering pairs a grid's blocks only when the
// doubled grid fits the multiprocessors (codegen_block_cluster.cpp); this checks that the GPCs'
// shape does not make a pair grid of up to 66 clusters spill into a second wave
// (bench/gpu_notes.md, version 15). Output: bench/results/cluster_occupancy_h200.txt.
//
//   nvcc -O2 -arch=sm_90 -o /tmp/cop bench/cluster_occupancy_probe.cu && /tmp/cop
#include <cstdio>

#include "probe_util.cuh"

namespace {

__global__ void touch(int* p) {
  extern __shared__ int shared[];
  if (p) p[0] = shared[threadIdx.x];
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  CK(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  CK(cudaFuncSetAttribute(touch, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (const int size : {1, 2, 4, 8})
    for (const int kb : {100, 180, 222}) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(128);
      config.blockDim = dim3(256);
      config.dynamicSmemBytes = size_t(kb) * 1024;
      cudaLaunchAttribute cluster[1];
      cluster[0].id = cudaLaunchAttributeClusterDimension;
      cluster[0].val.clusterDim.x = size;
      cluster[0].val.clusterDim.y = 1;
      cluster[0].val.clusterDim.z = 1;
      config.attrs = cluster;
      config.numAttrs = 1;
      int clusters = 0;
      CK(cudaOccupancyMaxActiveClusters(&clusters, touch, &config));
      std::printf("clusters of %d, %3d KB shared, 256 threads: %3d at once (%3d blocks)\n", size,
                  kb, clusters, clusters * size);
    }
  return 0;
}
