// Does compute-sanitizer racecheck model the ordering that bar.arrive gives? A producer/consumer hand-off of one
// shared buffer by named barriers, correct by the PTX memory model (bar.arrive: the arriving thread's prior accesses
// are performed when the barrier completes), in the form grouped_ws_kernel uses (full: the producer arrives, the
// consumers wait; empty: the reverse). Usage (on the GPU machine):
//   nvcc -arch=sm_90 ci/racecheck_named_barrier.cu -o /tmp/nb && compute-sanitizer --tool racecheck /tmp/nb
#include <cstdio>
#include <cuda_runtime.h>

__device__ __forceinline__ void nb_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nb_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

constexpr int ROUNDS = 8;

__global__ void handoff(int *out) {
    __shared__ int buf[128];
    const int tid = threadIdx.x;
    if (tid < 128) {  // producer: 128 threads
        for (int r = 0; r < ROUNDS; ++r) {
            if (r > 0) nb_sync(1, 256);       // EMPTY: the consumers are done with round r - 1
            buf[(tid * 7) % 128] = r + tid;    // another thread's slot than the consumer that reads it
            nb_arrive(2, 256);                 // FULL
        }
        nb_sync(1, 256);                       // the consumers' last EMPTY arrival
    } else {          // consumers: 128 threads
        int acc = 0;
        for (int r = 0; r < ROUNDS; ++r) {
            nb_sync(2, 256);                   // FULL
            acc += buf[tid - 128];
            nb_arrive(1, 256);                 // EMPTY
        }
        atomicAdd(out, acc);
    }
}

int main() {
    int *d = nullptr, h = 0;
    cudaMalloc(&d, sizeof(int));
    cudaMemset(d, 0, sizeof(int));
    handoff<<<1, 256>>>(d);
    cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
    // sum over rounds r and producer threads p of r + p = 128 * (0 + ... + 7) + 8 * (0 + ... + 127)
    const int want = 128 * (ROUNDS * (ROUNDS - 1) / 2) + ROUNDS * (127 * 128 / 2);
    std::printf("handoff checksum %d (expected %d): %s\n", h, want, h == want ? "ok" : "WRONG");
    return h == want ? 0 : 1;
}
