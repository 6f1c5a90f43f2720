// int8 x int8 -> int32 matrix products on the CPU, as XLA FFI calls.
//
// XLA's CPU backend converts an int8 operand of a dot to a 4-byte buffer
// before multiplying, so a decoding step reads 4 bytes a weight whatever
// the weights are stored in. These products read the int8 weights as they
// are, as llama.cpp's q8_0 and CTranslate2's int8 products do, and give
// exactly the integers XLA's dot gives.
//
//   y (M, N) = x (M, K) . w (K, N)      "kn": a Keras Dense kernel
//   y (M, N) = x (M, K) . w (N, K)^T    "nk": an embedding table as the output head
//
// With AVX512-VNNI, vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes
// and adds the 4 products into an int32 lane. w is made unsigned by adding
// 128 (w ^ 0x80); the 128 times the row's sum of x that this adds to every
// output is subtracted at the end. Integer sums are exact in any order, so
// the result does not depend on the blocking or the threads. Without
// AVX512-VNNI the same sums run as plain loops.

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kColumns = 64;  // columns of y a work unit computes
constexpr int64_t kAhead = 16;     // rows of w prefetched ahead

// Runs work(0) .. work(units - 1) on the calling thread and the XLA pool's
// others. Each unit is claimed from a shared counter, so a pool thread that
// starts late finds nothing left and returns; the caller waits only for
// units already claimed, which are running.
template <typename F>
void ParallelFor(ffi::ThreadPool& pool, int64_t units, const F& work) {
  const int64_t threads = std::min(pool.num_threads(), units);
  if (threads <= 1) {
    for (int64_t i = 0; i < units; ++i) work(i);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto state = std::make_shared<State>();
  auto run = [state, units, &work]() {
    for (int64_t i; (i = state->next.fetch_add(1)) < units;) {
      work(i);
      state->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < threads; ++t) pool.Schedule([run]() { run(); });
  run();
  while (state->done.load(std::memory_order_acquire) < units) _mm_pause();
}

int32_t RowSum(const int8_t* row, int64_t K) {
  int32_t sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += row[k];
  return sum;
}

uint32_t Quad(const int8_t* row, int64_t k, int64_t K) {
  uint32_t quad = 0;
  if (k + 4 <= K)
    std::memcpy(&quad, row + k, 4);
  else
    std::memcpy(&quad, row + k, K - k);
  return quad;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)

// Rows k..k+3 of the 64 columns of w (K, N) from n0, plus 128, as quads:
// after the two unpacks, int32 lane 4L + t of quads[j] holds the four rows
// of column 16L + 4j + t.
inline void Quads(const int8_t* w, int64_t K, int64_t N, int64_t k, int64_t n0, __mmask64 columns,
                  __m512i quads[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i rows[4];
  for (int i = 0; i < 4; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(w + (k + i + kAhead) * N + n0), _MM_HINT_T0);
    rows[i] = k + i < K ? _mm512_maskz_loadu_epi8(columns, w + (k + i) * N + n0) : _mm512_setzero_si512();
    rows[i] = _mm512_xor_si512(rows[i], flip);
  }
  const __m512i ab_lo = _mm512_unpacklo_epi8(rows[0], rows[1]), ab_hi = _mm512_unpackhi_epi8(rows[0], rows[1]);
  const __m512i cd_lo = _mm512_unpacklo_epi8(rows[2], rows[3]), cd_hi = _mm512_unpackhi_epi8(rows[2], rows[3]);
  quads[0] = _mm512_unpacklo_epi16(ab_lo, cd_lo);
  quads[1] = _mm512_unpackhi_epi16(ab_lo, cd_lo);
  quads[2] = _mm512_unpacklo_epi16(ab_hi, cd_hi);
  quads[3] = _mm512_unpackhi_epi16(ab_hi, cd_hi);
}

template <int R>
inline void Accumulate(const int8_t* x, int64_t K, int64_t m0, int64_t k, const __m512i quads[4], __m512i acc[][4]) {
  for (int r = 0; r < R; ++r) {
    const __m512i xs = _mm512_set1_epi32(static_cast<int>(Quad(x + (m0 + r) * K, k, K)));
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], quads[j], xs);
  }
}

template <int R>
inline void Store(const int8_t* x, int64_t K, int32_t* y, int64_t N, int64_t m0, int64_t n0, int64_t width,
                  __m512i acc[][4]) {
  alignas(64) int32_t lanes[4][16];
  for (int r = 0; r < R; ++r) {
    const __m512i correction = _mm512_set1_epi32(128 * RowSum(x + (m0 + r) * K, K));
    for (int j = 0; j < 4; ++j) _mm512_store_si512(lanes[j], _mm512_sub_epi32(acc[r][j], correction));
    int32_t* out = y + (m0 + r) * N + n0;
    for (int64_t c = 0; c < width; ++c) out[c] = lanes[(c % 16) / 4][4 * (c / 16) + c % 4];
  }
}

// y[m0:m0+R, n0:n0+64] of y = x w, w (K, N): each weight is read once for
// the R rows.
template <int R>
void KnTile(const int8_t* x, const int8_t* w, int32_t* y, int64_t K, int64_t N, int64_t m0, int64_t n0) {
  const int64_t width = std::min(kColumns, N - n0);
  const __mmask64 columns = width == 64 ? ~0ULL : (1ULL << width) - 1;
  __m512i acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_si512();
  __m512i quads[4];
  for (int64_t k = 0; k < K; k += 4) {
    Quads(w, K, N, k, n0, columns, quads);
    Accumulate<R>(x, K, m0, k, quads, acc);
  }
  Store<R>(x, K, y, N, m0, n0, width, acc);
}

// y[m0:m0+R, n0:n0+4] of y = x w^T, w (N, K): each column's sum runs along
// a row of w, 64 bytes at a time.
template <int R>
void NkTile(const int8_t* x, const int8_t* w, int32_t* y, int64_t K, int64_t N, int64_t m0, int64_t n0) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int outputs = static_cast<int>(std::min<int64_t>(4, N - n0));
  __m512i acc[R][4];
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < R; ++r) acc[r][j] = _mm512_setzero_si512();
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 inputs = K - k >= 64 ? ~0ULL : (1ULL << (K - k)) - 1;
    __m512i rows[4];
    for (int j = 0; j < 4; ++j)
      rows[j] = _mm512_xor_si512(j < outputs ? _mm512_maskz_loadu_epi8(inputs, w + (n0 + j) * K + k)
                                             : _mm512_setzero_si512(), flip);
    for (int r = 0; r < R; ++r) {
      const __m512i xs = _mm512_maskz_loadu_epi8(inputs, x + (m0 + r) * K + k);  // zero past K
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], rows[j], xs);
    }
  }
  for (int r = 0; r < R; ++r) {
    const int32_t correction = 128 * RowSum(x + (m0 + r) * K, K);
    for (int j = 0; j < outputs; ++j) y[(m0 + r) * N + n0 + j] = _mm512_reduce_add_epi32(acc[r][j]) - correction;
  }
}

// tile(rows, m0) over all M rows, in tiles of 4 and one of what is left;
// rows is a compile-time constant (std::integral_constant), so each tile's
// accumulators stay in registers.
template <typename Tile>
void RowTiles(int64_t M, const Tile& tile) {
  int64_t m0 = 0;
  for (; m0 + 4 <= M; m0 += 4) tile(std::integral_constant<int, 4>{}, m0);
  switch (M - m0) {
    case 3: tile(std::integral_constant<int, 3>{}, m0); break;
    case 2: tile(std::integral_constant<int, 2>{}, m0); break;
    case 1: tile(std::integral_constant<int, 1>{}, m0); break;
  }
}

// The 64 columns of a unit from n0, all rows.
void KnUnit(const int8_t* x, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  RowTiles(M, [&](auto rows, int64_t m0) { KnTile<decltype(rows)::value>(x, w, y, K, N, m0, n0); });
}

void NkUnit(const int8_t* x, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  for (int64_t n = n0; n < std::min(N, n0 + kColumns); n += 4)
    RowTiles(M, [&](auto rows, int64_t m0) { NkTile<decltype(rows)::value>(x, w, y, K, N, m0, n); });
}

constexpr bool kVnni = true;

#else

void KnUnit(const int8_t* x, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  const int64_t n1 = std::min(N, n0 + kColumns);
  for (int64_t m = 0; m < M; ++m) {
    int32_t acc[kColumns] = {0};
    for (int64_t k = 0; k < K; ++k) {
      const int32_t xs = x[m * K + k];
      for (int64_t n = n0; n < n1; ++n) acc[n - n0] += xs * w[k * N + n];
    }
    std::memcpy(y + m * N + n0, acc, (n1 - n0) * sizeof(int32_t));
  }
}

void NkUnit(const int8_t* x, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  const int64_t n1 = std::min(N, n0 + kColumns);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = acc;
    }
}

constexpr bool kVnni = false;

#endif

ffi::Error IntegerMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::S8> x, ffi::Buffer<ffi::S8> w,
                         ffi::ResultBuffer<ffi::S32> y, bool transposed) {
  const auto xd = x.dimensions(), wd = w.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || yd.size() != 2)
    return ffi::Error::InvalidArgument("integer_matmul: expected x (M, K), w (K, N) or (N, K) and y (M, N)");
  const int64_t M = xd[0], K = xd[1], N = transposed ? wd[0] : wd[1];
  if ((transposed ? wd[1] : wd[0]) != K || yd[0] != M || yd[1] != N)
    return ffi::Error::InvalidArgument("integer_matmul: the shapes of x, w and y do not agree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const int8_t* xs = x.typed_data();
  const int8_t* ws = w.typed_data();
  int32_t* ys = y->typed_data();
  const int64_t units = (N + kColumns - 1) / kColumns;
  if (transposed)
    ParallelFor(pool, units, [&](int64_t u) { NkUnit(xs, ws, ys, M, K, N, u * kColumns); });
  else
    ParallelFor(pool, units, [&](int64_t u) { KnUnit(xs, ws, ys, M, K, N, u * kColumns); });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooIntegerMatmul, IntegerMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<bool>("transposed"));

// Whether this build multiplies with AVX512-VNNI (1) or plain loops (0).
extern "C" int ZooIntegerMatmulVnni() { return kVnni ? 1 : 0; }
