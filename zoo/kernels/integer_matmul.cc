// Quantized matrix products on the CPU, as XLA FFI calls: int8 x int8 ->
// int32, float x int8 -> float (the rows of x quantized in the call, the
// product de-scaled), and float x int4 in groups -> float (the rows of x
// quantized to int8 in the same groups); a float32 tied head of a few
// rows; and, at the end of the file, a decoding step's attention over its
// cache and the top k of each row (a beam search's candidates).
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
//
//   y (M, N) = x (M, K) . W (K, N),  W[k, n] = (q[k, n] - z[g, n]) s[g, n],  g = k / B
//
// is Keras' int4 Dense kernel quantized in groups of B inputs: q signed
// 4-bit integers packed two a byte along N (column 2j in the low nibble,
// 2j + 1 in the high one), z int8 zero points and s float scales (G, N).
// Transposed, W^T (N, K) is Keras' int4 Embedding table quantized in
// groups along K (the output head of a tied embedding): q packed two a
// byte along K, s and z (N, G). x is quantized to int8 in the same groups
// and the 4-bit weights are multiplied by it in integers (the section
// "int4 in groups" below).

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kColumns = 64;  // columns of y a work unit computes
constexpr int64_t kInt4Columns = 128;  // of the int4 product of a Dense kernel (64 bytes of a row of w)
constexpr int kTileRows = 4;  // rows of x up to which w is read straight into the products
constexpr int kPanelRows = 6;  // rows of x a tile multiplies by a packed panel
constexpr int64_t kTopKLargest = 64;  // the largest k top_k takes
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr bool kVnni = true;  // the products in vpdpbusd, else in plain loops
#else
constexpr bool kVnni = false;
#endif
// Weights are read from memory once a token, so each product prefetches
// them: a Dense kernel (K, N) kAhead rows ahead of the row it reads, into
// L2 (a unit reads 64 bytes a row, rows hundreds of bytes apart), an
// embedding table (N, K) the rows of the next outputs (kRowsAhead for
// int8) at the same inputs. Measured on products of SmolLM2-135M's shape
// streamed from memory at batch 1 (AMD EPYC, 2 threads): 160 rows ahead
// into L2 against 48 into L1, 1536 x 576 took 24% less time in int8 and
// 20% less in int4, 576 x 1536 3% and 17% less; fewer rows ahead left the
// weights' reads waiting on memory.
constexpr int64_t kAhead = 160;
constexpr int64_t kRowsAhead = 8;

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

// The largest |x[i]| of n values; NaN where one is NaN.
float Largest(const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 largest = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 part = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(part, x + i));
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    largest = _mm512_max_ps(largest, a);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(largest);
#else
  float largest = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    largest = (a > largest || std::isnan(a)) ? a : largest;
  }
  return largest;
#endif
}

int32_t RowSum(const int8_t* row, int64_t K) {
  int32_t sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += row[k];
  return sum;
}

// 128 times each row's sum: what adding 128 to the weights (to make them
// unsigned for vpdpbusd) adds to each of the row's products.
std::vector<int32_t> Corrections(const int8_t* x, int64_t M, int64_t K) {
  std::vector<int32_t> corrections(M, 0);
  if (kVnni)
    for (int64_t m = 0; m < M; ++m) corrections[m] = 128 * RowSum(x + m * K, K);
  return corrections;
}

uint32_t Quad(const int8_t* row, int64_t k, int64_t K) {
  uint32_t quad = 0;
  if (k + 4 <= K)
    std::memcpy(&quad, row + k, 4);
  else
    std::memcpy(&quad, row + k, K - k);
  return quad;
}

// tile(rows, m0) over rows m0 .. M - 1, in tiles of T and then of fewer;
// rows is a compile-time constant (std::integral_constant), so each tile's
// accumulators stay in registers.
template <int T, typename Tile>
void RowTiles(int64_t m0, int64_t M, const Tile& tile) {
  for (; m0 + T <= M; m0 += T) tile(std::integral_constant<int, T>{}, m0);
  if constexpr (T > 1)
    if (m0 < M) RowTiles<T - 1>(m0, M, tile);
}

template <typename Tile>
void RowTiles(int64_t M, const Tile& tile) {
  RowTiles<4>(0, M, tile);
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
    _mm_prefetch(reinterpret_cast<const char*>(w + (k + i + kAhead) * N + n0), _MM_HINT_T1);
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
inline void Store(const int32_t* corrections, int32_t* y, int64_t N, int64_t m0, int64_t n0, int64_t width,
                  __m512i acc[][4]) {
  alignas(64) int32_t lanes[4][16];
  for (int r = 0; r < R; ++r) {
    const __m512i correction = _mm512_set1_epi32(corrections[m0 + r]);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(lanes[j], _mm512_sub_epi32(acc[r][j], correction));
    int32_t* out = y + (m0 + r) * N + n0;
    for (int64_t c = 0; c < width; ++c) out[c] = lanes[(c % 16) / 4][4 * (c / 16) + c % 4];
  }
}

// y[m0:m0+R, n0:n0+64] of y = x w, w (K, N): each weight is read once for
// the R rows.
template <int R>
void KnTile(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t K, int64_t N, int64_t m0,
            int64_t n0) {
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
  Store<R>(corrections, y, N, m0, n0, width, acc);
}

// y[m0:m0+R, n0:n0+4] of y = x w^T, w (N, K): each column's sum runs along
// a row of w, 64 bytes at a time.
template <int R>
void NkTile(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t K, int64_t N, int64_t m0,
            int64_t n0) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int outputs = static_cast<int>(std::min<int64_t>(4, N - n0));
  __m512i acc[R][4];
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < R; ++r) acc[r][j] = _mm512_setzero_si512();
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 inputs = K - k >= 64 ? ~0ULL : (1ULL << (K - k)) - 1;
    __m512i rows[4];
    for (int j = 0; j < 4; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + (n0 + j + kRowsAhead) * K + k), _MM_HINT_T0);
    for (int j = 0; j < 4; ++j)
      rows[j] = _mm512_xor_si512(j < outputs ? _mm512_maskz_loadu_epi8(inputs, w + (n0 + j) * K + k)
                                             : _mm512_setzero_si512(), flip);
    for (int r = 0; r < R; ++r) {
      const __m512i xs = _mm512_maskz_loadu_epi8(inputs, x + (m0 + r) * K + k);  // zero past K
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], rows[j], xs);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < outputs; ++j) y[(m0 + r) * N + n0 + j] = _mm512_reduce_add_epi32(acc[r][j]) - corrections[m0 + r];
  }
}


// More than 4 rows of x: each unit first packs its 64 columns of w into a
// panel, in the layout vpdpbusd takes (4 inputs of 16 columns a register,
// plus 128, in column order), then multiplies every row of x by it from
// the caches. The panel is made once a unit instead of once a tile of
// rows, so its shuffles are paid once for all M rows.

// The 4 x 4 blocks of 128 bits of v transposed: block a of out[L] is
// block L of v[a].
inline void TransposeBlocks(const __m512i v[4], __m512i out[4]) {
  const __m512i u0 = _mm512_shuffle_i32x4(v[0], v[1], 0x44), u1 = _mm512_shuffle_i32x4(v[0], v[1], 0xEE);
  const __m512i u2 = _mm512_shuffle_i32x4(v[2], v[3], 0x44), u3 = _mm512_shuffle_i32x4(v[2], v[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(u0, u2, 0x88);
  out[1] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
  out[2] = _mm512_shuffle_i32x4(u1, u3, 0x88);
  out[3] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
}

// panel[4 q + j], lane l: inputs 4q .. 4q + 3 of column n0 + 16 j + l, of w (K, N).
void PackKn(const int8_t* w, int64_t K, int64_t N, int64_t n0, __m512i* panel) {
  const int64_t width = std::min(kColumns, N - n0);
  const __mmask64 columns = width == 64 ? ~0ULL : (1ULL << width) - 1;
  __m512i quads[4];
  for (int64_t k = 0; k < K; k += 4) {
    Quads(w, K, N, k, n0, columns, quads);  // lane 4L + t of quads[j]: column 16 L + 4 j + t
    TransposeBlocks(quads, panel + k);
  }
}

// The same panel from w (N, K): 16 rows of w (16 columns of the product)
// at a time, 64 inputs each, their 32-bit words transposed.
void PackNk(const int8_t* w, int64_t K, int64_t N, int64_t n0, __m512i* panel) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t quads = (K + 3) / 4;
  for (int j = 0; j < 4; ++j)
    for (int64_t k = 0; k < K; k += 64) {
      const __mmask64 inputs = K - k >= 64 ? ~0ULL : (1ULL << (K - k)) - 1;
      __m512i r[16], t[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + 16 * j + i;
        r[i] = n < N ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(inputs, w + n * K + k), flip) : flip;
      }
      for (int i = 0; i < 16; i += 2) {  // lanes 4L ..: words 4L, 4L + 1 of rows i, i + 1 interleaved
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int a = 0; a < 4; ++a)  // r[4 a + e], block L: word 4L + e of rows 4a .. 4a + 3
        for (int e = 0; e < 2; ++e) {
          r[4 * a + 2 * e] = _mm512_unpacklo_epi64(t[4 * a + e], t[4 * a + 2 + e]);
          r[4 * a + 2 * e + 1] = _mm512_unpackhi_epi64(t[4 * a + e], t[4 * a + 2 + e]);
        }
      for (int e = 0; e < 4; ++e) {
        const __m512i v[4] = {r[e], r[4 + e], r[8 + e], r[12 + e]};
        __m512i out[4];  // out[L]: word 4L + e of all 16 rows
        TransposeBlocks(v, out);
        for (int L = 0; L < 4; ++L) {
          const int64_t q = k / 4 + 4 * L + e;
          if (q < quads) panel[4 * q + j] = out[L];
        }
      }
    }
}

// y[m0:m0+R, n0:n0+64] from a unit's panel. The accumulators are named
// variables, not an array: GCC (12) keeps an array of them in memory, or
// copies them between registers around every product.
template <int R>
void PanelTile(const int8_t* x, int64_t stride, const __m512i* panel, const int32_t* corrections, int32_t* y,
               int64_t K, int64_t N, int64_t m0, int64_t n0) {
  static_assert(R >= 1 && R <= 6, "a tile of 1 to 6 rows");
  const __m512i zero = _mm512_setzero_si512();
  __m512i a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero, a12 = zero, a13 = zero;
  __m512i a20 = zero, a21 = zero, a22 = zero, a23 = zero, a30 = zero, a31 = zero, a32 = zero, a33 = zero;
  __m512i a40 = zero, a41 = zero, a42 = zero, a43 = zero, a50 = zero, a51 = zero, a52 = zero, a53 = zero;
  const int8_t* rows = x + m0 * stride;
  for (int64_t k = 0; k < K; k += 4) {
    const __m512i q0 = _mm512_load_si512(panel + k), q1 = _mm512_load_si512(panel + k + 1);
    const __m512i q2 = _mm512_load_si512(panel + k + 2), q3 = _mm512_load_si512(panel + k + 3);
#define ZOO_ROW(r)                                              \
    if (R > r) {                                                \
      int32_t quad;                                             \
      std::memcpy(&quad, rows + r * stride + k, 4);             \
      const __m512i xs = _mm512_set1_epi32(quad);               \
      a##r##0 = _mm512_dpbusd_epi32(a##r##0, q0, xs);           \
      a##r##1 = _mm512_dpbusd_epi32(a##r##1, q1, xs);           \
      a##r##2 = _mm512_dpbusd_epi32(a##r##2, q2, xs);           \
      a##r##3 = _mm512_dpbusd_epi32(a##r##3, q3, xs);           \
    }
    ZOO_ROW(0) ZOO_ROW(1) ZOO_ROW(2) ZOO_ROW(3) ZOO_ROW(4) ZOO_ROW(5)
#undef ZOO_ROW
  }
  const __m512i acc[6][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23},
                             {a30, a31, a32, a33}, {a40, a41, a42, a43}, {a50, a51, a52, a53}};
  for (int j = 0; j < 4; ++j) {
    const int64_t left = std::clamp<int64_t>(N - n0 - 16 * j, 0, 16);
    const __mmask16 part = left == 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_epi32(y + (m0 + r) * N + n0 + 16 * j, part,
                               _mm512_sub_epi32(acc[r][j], _mm512_set1_epi32(corrections[m0 + r])));
  }
}

void PanelUnit(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t M, int64_t K,
               int64_t N, int64_t n0, bool transposed) {
  const int64_t stride = (K + 3) / 4 * 4;  // x's rows, padded with zeros to whole quads where K is not
  thread_local std::vector<__m512i> panel;
  thread_local std::vector<int8_t> padded;
  panel.resize(static_cast<size_t>(stride));
  if (stride != K) {
    padded.assign(M * stride, 0);
    for (int64_t m = 0; m < M; ++m) std::memcpy(padded.data() + m * stride, x + m * K, K);
    x = padded.data();
  }
  if (transposed)
    PackNk(w, K, N, n0, panel.data());
  else
    PackKn(w, K, N, n0, panel.data());
  RowTiles<kPanelRows>(0, M, [&](auto rows, int64_t m0) {
    PanelTile<decltype(rows)::value>(x, stride, panel.data(), corrections, y, K, N, m0, n0);
  });
}

// The 64 columns of a unit from n0, all rows.
void KnUnit(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N,
            int64_t n0) {
  if (M > kTileRows) return PanelUnit(x, corrections, w, y, M, K, N, n0, false);
  RowTiles(M, [&](auto rows, int64_t m0) { KnTile<decltype(rows)::value>(x, corrections, w, y, K, N, m0, n0); });
}

void NkUnit(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N,
            int64_t n0) {
  if (M > kTileRows) return PanelUnit(x, corrections, w, y, M, K, N, n0, true);
  for (int64_t n = n0; n < std::min(N, n0 + kColumns); n += 4)
    RowTiles(M, [&](auto rows, int64_t m0) { NkTile<decltype(rows)::value>(x, corrections, w, y, K, N, m0, n); });
}

#else

void KnUnit(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N,
            int64_t n0) {
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

void NkUnit(const int8_t* x, const int32_t* corrections, const int8_t* w, int32_t* y, int64_t M, int64_t K, int64_t N,
            int64_t n0) {
  const int64_t n1 = std::min(N, n0 + kColumns);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = acc;
    }
}

#endif

// y (M, N) = x (M, K) . w (N, K)^T in float32: a tied output head (the
// embedding table) at a decoding step of 2-4 rows, where XLA's CPU dot
// reads the table at about 15 GB/s (at one row it reads it at 30-50).
// Here 4 outputs' rows are read along K side by side, 16 floats at a
// time, for all the rows of x, with the next 4 outputs' rows prefetched:
// about 23 GB/s. The sums run in another order than XLA's (float32
// rounding differs in the last bits).
#if defined(__AVX512F__)

template <int R>
void FloatNkTile(const float* x, const float* w, float* y, int64_t K, int64_t N, int64_t m0, int64_t n0) {
  static_assert(R >= 1 && R <= 4, "a tile of 1 to 4 rows");
  const int outputs = static_cast<int>(std::min<int64_t>(4, N - n0));
  const float* r0 = w + n0 * K;
  const float* r1 = w + (n0 + (outputs > 1 ? 1 : 0)) * K;  // past N, row n0 again (its sums are not stored)
  const float* r2 = w + (n0 + (outputs > 2 ? 2 : 0)) * K;
  const float* r3 = w + (n0 + (outputs > 3 ? 3 : 0)) * K;
  const __m512 zero = _mm512_setzero_ps();
  __m512 a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero, a12 = zero, a13 = zero;
  __m512 a20 = zero, a21 = zero, a22 = zero, a23 = zero, a30 = zero, a31 = zero, a32 = zero, a33 = zero;
  const float* xs = x + m0 * K;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 part = K - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (K - k)) - 1);
    _mm_prefetch(reinterpret_cast<const char*>(r0 + 4 * K + k), _MM_HINT_T0);  // the next tile's rows
    _mm_prefetch(reinterpret_cast<const char*>(r0 + 5 * K + k), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(r0 + 6 * K + k), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(r0 + 7 * K + k), _MM_HINT_T0);
    const __m512 w0 = _mm512_maskz_loadu_ps(part, r0 + k), w1 = _mm512_maskz_loadu_ps(part, r1 + k);
    const __m512 w2 = _mm512_maskz_loadu_ps(part, r2 + k), w3 = _mm512_maskz_loadu_ps(part, r3 + k);
#define ZOO_ROW(r)                                                   \
    if (R > r) {                                                     \
      const __m512 xr = _mm512_maskz_loadu_ps(part, xs + r * K + k); \
      a##r##0 = _mm512_fmadd_ps(w0, xr, a##r##0);                    \
      a##r##1 = _mm512_fmadd_ps(w1, xr, a##r##1);                    \
      a##r##2 = _mm512_fmadd_ps(w2, xr, a##r##2);                    \
      a##r##3 = _mm512_fmadd_ps(w3, xr, a##r##3);                    \
    }
    ZOO_ROW(0) ZOO_ROW(1) ZOO_ROW(2) ZOO_ROW(3)
#undef ZOO_ROW
  }
  const __m512 acc[4][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}};
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < outputs; ++j) y[(m0 + r) * N + n0 + j] = _mm512_reduce_add_ps(acc[r][j]);
}

void FloatNkUnit(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  for (int64_t n = n0; n < std::min(N, n0 + kColumns); n += 4)
    RowTiles(M, [&](auto rows, int64_t m0) { FloatNkTile<decltype(rows)::value>(x, w, y, K, N, m0, n); });
}

#else

void FloatNkUnit(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < std::min(N, n0 + kColumns); ++n) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += x[m * K + k] * w[n * K + k];
      y[m * N + n] = sum;
    }
}

#endif

ffi::Error FloatMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                       ffi::ResultBuffer<ffi::F32> y) {
  const auto xd = x.dimensions(), wd = w.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || yd.size() != 2)
    return ffi::Error::InvalidArgument("float_matmul: expected x (M, K), w (N, K) and y (M, N)");
  const int64_t M = xd[0], K = xd[1], N = wd[0];
  if (wd[1] != K || yd[0] != M || yd[1] != N)
    return ffi::Error::InvalidArgument("float_matmul: the shapes of x, w and y do not agree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const float* xs = x.typed_data();
  const float* ws = w.typed_data();
  float* ys = y->typed_data();
  ParallelFor(pool, (N + kColumns - 1) / kColumns, [&](int64_t u) { FloatNkUnit(xs, ws, ys, M, K, N, u * kColumns); });
  return ffi::Error::Success();
}

// y (M, N) = x (M, K) . w (K, N) in float32: a Dense kernel at a decoding
// step of 1-4 rows. Split by columns, as XLA's dot and the int8 products
// split it, each thread reads a few hundred bytes of every row of w, rows
// N floats apart. Here the work is split by rows of w instead: each part
// reads its rows whole, one contiguous run of memory, 4 rows a pass into
// partial sums of all N outputs held in L1, with the rows kFloatRowsAhead
// further on prefetched into L2; the parts are added in order at the end.
// SmolLM2-135M's 210 Dense kernels at one row, in turn in one compiled
// program (2 threads, AMD EPYC), arrived at 17-19 GB/s through XLA's dot,
// 20 split by rows, 24-25 with the prefetching (4 to 12 rows ahead alike,
// 32 less). The parts are fixed by the pool's threads, not by which thread
// runs which, so a machine's result is the same on every call; its sums
// run in another order than XLA's.
constexpr int64_t kFloatRowsAhead = 8;

int64_t FloatKnParts(int64_t threads, int64_t K) {
  return std::max<int64_t>(1, std::min(2 * threads, K / 64));  // two a thread, of at least 64 rows
}

#if defined(__AVX512F__)

// part (M, N) = x[:, k0:k1] . w[k0:k1, :], M = R
template <int R>
void FloatKnPart(const float* x, const float* w, float* part, int64_t K, int64_t N, int64_t k0, int64_t k1) {
  constexpr int64_t M = R;
  for (int64_t i = 0; i < M * N; ++i) part[i] = 0.0f;
  int64_t k = k0;
  for (; k + 4 <= k1; k += 4) {
    const float* r = w + k * N;
    __m512 xs[4][4];
    for (int64_t m = 0; m < M; ++m)
      for (int t = 0; t < 4; ++t) xs[m][t] = _mm512_set1_ps(x[m * K + k + t]);
    for (int64_t n = 0; n < N; n += 16) {
      const __mmask16 lanes = N - n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (N - n)) - 1);
      for (int t = 0; t < 4; ++t)
        _mm_prefetch(reinterpret_cast<const char*>(r + (kFloatRowsAhead + t) * N + n), _MM_HINT_T1);
      const __m512 w0 = _mm512_maskz_loadu_ps(lanes, r + n), w1 = _mm512_maskz_loadu_ps(lanes, r + N + n);
      const __m512 w2 = _mm512_maskz_loadu_ps(lanes, r + 2 * N + n), w3 = _mm512_maskz_loadu_ps(lanes, r + 3 * N + n);
      for (int64_t m = 0; m < M; ++m) {
        float* p = part + m * N + n;
        __m512 a = _mm512_maskz_loadu_ps(lanes, p);
        a = _mm512_fmadd_ps(xs[m][0], w0, a);
        a = _mm512_fmadd_ps(xs[m][1], w1, a);
        a = _mm512_fmadd_ps(xs[m][2], w2, a);
        a = _mm512_fmadd_ps(xs[m][3], w3, a);
        _mm512_mask_storeu_ps(p, lanes, a);
      }
    }
  }
  for (; k < k1; ++k)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) part[m * N + n] = std::fma(x[m * K + k], w[k * N + n], part[m * N + n]);
}

void FloatKnPart(const float* x, const float* w, float* part, int64_t M, int64_t K, int64_t N, int64_t k0, int64_t k1) {
  switch (M) {
    case 1: return FloatKnPart<1>(x, w, part, K, N, k0, k1);
    case 2: return FloatKnPart<2>(x, w, part, K, N, k0, k1);
    case 3: return FloatKnPart<3>(x, w, part, K, N, k0, k1);
    default: return FloatKnPart<4>(x, w, part, K, N, k0, k1);
  }
}

#else

void FloatKnPart(const float* x, const float* w, float* part, int64_t M, int64_t K, int64_t N, int64_t k0, int64_t k1) {
  for (int64_t i = 0; i < M * N; ++i) part[i] = 0.0f;
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) part[m * N + n] = std::fma(x[m * K + k], w[k * N + n], part[m * N + n]);
}

#endif

ffi::Error FloatDense(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                      ffi::ResultBuffer<ffi::F32> y) {
  const auto xd = x.dimensions(), wd = w.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || yd.size() != 2)
    return ffi::Error::InvalidArgument("float_dense: expected x (M, K), w (K, N) and y (M, N)");
  const int64_t M = xd[0], K = xd[1], N = wd[1];
  if (wd[0] != K || yd[0] != M || yd[1] != N)
    return ffi::Error::InvalidArgument("float_dense: the shapes of x, w and y do not agree");
  if (M > kTileRows) return ffi::Error::InvalidArgument("float_dense: expected at most 4 rows of x");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const float* xs = x.typed_data();
  const float* ws = w.typed_data();
  float* ys = y->typed_data();
  const int64_t parts = FloatKnParts(pool.num_threads(), K);
  const int64_t rows = (K / parts + 3) / 4 * 4;  // of w a part: a multiple of 4, the last part the rest
  std::vector<float> partials((parts - 1) * M * N);
  ParallelFor(pool, parts, [&](int64_t p) {
    const int64_t k0 = std::min(K, p * rows), k1 = p == parts - 1 ? K : std::min(K, (p + 1) * rows);
    FloatKnPart(xs, ws, p == 0 ? ys : partials.data() + (p - 1) * M * N, M, K, N, k0, k1);
  });
  for (int64_t p = 1; p < parts; ++p) {
    const float* part = partials.data() + (p - 1) * M * N;
    for (int64_t i = 0; i < M * N; ++i) ys[i] += part[i];
  }
  return ffi::Error::Success();
}

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
  const std::vector<int32_t> corrections = Corrections(xs, M, K);
  const int64_t units = (N + kColumns - 1) / kColumns;
  if (transposed)
    ParallelFor(pool, units, [&](int64_t u) { NkUnit(xs, corrections.data(), ws, ys, M, K, N, u * kColumns); });
  else
    ParallelFor(pool, units, [&](int64_t u) { KnUnit(xs, corrections.data(), ws, ys, M, K, N, u * kColumns); });
  return ffi::Error::Success();
}

// x (K) quantized as Keras' AbsMaxQuantizer does it, into q: returns its
// scale 127 / (max |x| + epsilon); q = clip(round(x scale), -127, 127),
// rounded half to even, NaN to 0. The float32 operations are the scalar
// ones, so the vector path's numbers are the same.
float QuantizeRow(const float* x, int64_t K, float epsilon, int8_t* q) {
  const float scale = 127.0f / (Largest(x, K) + epsilon);
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512 s = _mm512_set1_ps(scale), low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 part = K - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (K - k)) - 1);
    const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(part, x + k), s),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 clipped = _mm512_min_ps(_mm512_max_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v),
                                                       low), high);
    _mm_mask_storeu_epi8(q + k, part, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(clipped)));
  }
#else
  for (int64_t k = 0; k < K; ++k) {
    const float v = std::nearbyint(x[k] * scale);
    q[k] = std::isnan(v) ? 0 : static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
#endif
  return scale;
}

// y[n0:n1] (the integer products, in place) divided by scale[n] times the row's scale.
void Descale(float* y, const float* scale, float row_scale, int64_t n0, int64_t n1) {
#if defined(__AVX512F__)
  const __m512 r = _mm512_set1_ps(row_scale);
  for (int64_t n = n0; n < n1; n += 16) {
    const __mmask16 part = n1 - n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n1 - n)) - 1);
    const __m512 product = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(part, y + n));
    _mm512_mask_storeu_ps(y + n, part, _mm512_div_ps(product, _mm512_mul_ps(_mm512_maskz_loadu_ps(part, scale + n), r)));
  }
#else
  for (int64_t n = n0; n < n1; ++n) {
    int32_t product;
    std::memcpy(&product, y + n, sizeof product);
    y[n] = static_cast<float>(product) / (scale[n] * row_scale);
  }
#endif
}

// y = (x_q w) / (w_scale x_scale): Keras' int8 product in one call. Each
// row of x is quantized as Keras' AbsMaxQuantizer does it (x_scale =
// 127 / (max |x| + epsilon), x_q = clip(round(x x_scale), -127, 127), the
// same float32 operations in the same order), multiplied exactly in
// integers, and each output divided by its column's scale times its row's.
ffi::Error QuantizedMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> w,
                           ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> y, bool transposed,
                           float epsilon) {
  const auto xd = x.dimensions(), wd = w.dimensions(), sd = scale.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || sd.size() != 1 || yd.size() != 2)
    return ffi::Error::InvalidArgument(
        "quantized_matmul: expected x (M, K), w (K, N) or (N, K), scale (N,) and y (M, N)");
  const int64_t M = xd[0], K = xd[1], N = transposed ? wd[0] : wd[1];
  if ((transposed ? wd[1] : wd[0]) != K || sd[0] != N || yd[0] != M || yd[1] != N)
    return ffi::Error::InvalidArgument("quantized_matmul: the shapes of x, w, scale and y do not agree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const float* xs = x.typed_data();
  const float* ss = scale.typed_data();
  float* ys = y->typed_data();
  std::vector<int8_t> quantized(M * K);
  std::vector<float> row_scale(M);
  const auto quantize = [&](int64_t m) { row_scale[m] = QuantizeRow(xs + m * K, K, epsilon, quantized.data() + m * K); };
  if (M > kTileRows)
    ParallelFor(pool, M, quantize);
  else
    for (int64_t m = 0; m < M; ++m) quantize(m);
  const std::vector<int32_t> corrections = Corrections(quantized.data(), M, K);
  // Each unit's integer products are written where its outputs go, then de-scaled in place.
  int32_t* products = reinterpret_cast<int32_t*>(ys);
  const int8_t* ws = w.typed_data();
  ParallelFor(pool, (N + kColumns - 1) / kColumns, [&](int64_t u) {
    const int64_t n0 = u * kColumns, n1 = std::min(N, n0 + kColumns);
    if (transposed)
      NkUnit(quantized.data(), corrections.data(), ws, products, M, K, N, n0);
    else
      KnUnit(quantized.data(), corrections.data(), ws, products, M, K, N, n0);
    for (int64_t m = 0; m < M; ++m) Descale(ys + m * N, ss, row_scale[m], n0, n1);
  });
  return ffi::Error::Success();
}

// int4 in groups times activations quantized to int8 in the same groups:
//
//   y[m, n] = sum_g d[m, g] s[g, n] (sum_{k in g} a[m, k] q[k, n] - z[g, n] sum_{k in g} a[m, k])
//
// where a[m, k] = round(x[m, k] 127 / max_{k in g} |x[m, k]|) (int8) and
// d[m, g] = max |x| / 127: the rows of x quantized to int8 in the
// weights' groups, as llama.cpp's q4_0 product quantizes them (q8_0).
// With AVX512-VNNI the 4-bit weights are made unsigned (q + 8: the
// nibble's bits xor 8) and multiplied by the 8-bit activations with
// vpdpbusd, four inputs a lane, exactly in int32; the 8 times the group's
// sum of a that this adds is subtracted with the zero points.

// x quantized in groups of `block`: a (M, Ka) int8, each group's inputs
// from g Bp (Bp = block rounded up to 4, zero past the group's end), and
// d and sums (M, G).
struct QuantizedRows {
  std::vector<int8_t> a;
  std::vector<float> d;
  std::vector<int32_t> sums;
  int64_t Ka, Bp;
  const int8_t* At(int64_t m, int64_t k, int64_t block) const { return a.data() + m * Ka + k / block * Bp + k % block; }
};

// a = clip(round(x inverse), -127, 127) of a group of n finite inputs,
// rounded half to even, in vectors where the CPU has them: the sum of a.
int32_t RoundGroup(const float* x, int64_t n, float inverse, int8_t* a) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512 scale = _mm512_set1_ps(inverse), low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 part = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(part, x + k), scale),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i rounded = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, low), high));
    sum = _mm512_add_epi32(sum, rounded);  // zero past n: the masked load's zeros
    _mm_mask_storeu_epi8(a + k, part, _mm512_cvtepi32_epi8(rounded));
  }
  return _mm512_reduce_add_epi32(sum);
#else
  int32_t sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    a[k] = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f));
    sum += a[k];
  }
  return sum;
#endif
}

QuantizedRows QuantizeGroups(const float* x, int64_t M, int64_t K, int64_t block) {
  const int64_t G = (K + block - 1) / block, Bp = (block + 3) / 4 * 4;
  QuantizedRows q{std::vector<int8_t>(M * G * Bp, 0), std::vector<float>(M * G, 0.0f), std::vector<int32_t>(M * G, 0),
                  G * Bp, Bp};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * block, k1 = std::min(K, k0 + block);
      const float largest = Largest(x + m * K + k0, k1 - k0);
      if (!std::isfinite(largest)) {  // the group's outputs are NaN, as a float product's would be
        q.d[m * G + g] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (largest == 0.0f) continue;
      const float inverse = 127.0f / largest;
      q.d[m * G + g] = largest / 127.0f;
      q.sums[m * G + g] = RoundGroup(x + m * K + k0, k1 - k0, inverse, q.a.data() + m * q.Ka + g * Bp);
    }
  return q;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)

// y[m0:m0+R, n0:n0+64H] of the int4 product of a Dense kernel, w (K,
// ceil(N / 2)). Each visit of rows k..k+3 loads their 32H bytes (64H
// columns; with H = 2 a row's 64 bytes, a cache line where the row starts
// on one, in one visit); each 32 bytes' low nibbles (even columns) go in
// the lower half of a register and the high ones (odd columns) in the
// upper half, and the four rows are interleaved into quads as the int8
// product does: int32 lane 4L + t of quads[j] holds column 32 L + 8 j + 2 t
// of the 64 for L < 2, and 32 (L - 2) + 8 j + 2 t + 1 for L >= 2. At a
// group's end one permutation puts the sums back in column order.
template <int R, int H>
void Int4Tile(const QuantizedRows& xq, const int8_t* w, const float* s, const int8_t* z, float* y, int64_t K,
                       int64_t N, int64_t G, int64_t block, int64_t m0, int64_t n0) {
  const int64_t packed = (N + 1) / 2;
  __mmask32 loaded[H];  // bytes n0 / 2 + 32 h .. of a row inside it
  for (int h = 0; h < H; ++h) {
    const int64_t width = std::clamp<int64_t>(packed - n0 / 2 - 32 * h, 0, 32);
    loaded[h] = width == 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << width) - 1);
  }
  __mmask16 parts[4 * H];  // columns n0 + 16 c .. inside N
  for (int c = 0; c < 4 * H; ++c) {
    const int64_t left = std::clamp<int64_t>(N - n0 - 16 * c, 0, 16);
    parts[c] = left == 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
  }
  // Output c of 64 columns (columns 16 c ..) from quads 2 (c % 2) and 2 (c % 2) + 1: column 16 c + u is
  // lane 4 (c / 2 + 2 (u % 2)) + (u % 8) / 2 of quad u / 8 of the pair.
  alignas(64) static const auto lanes = [] {
    std::array<std::array<int32_t, 16>, 4> table{};
    for (int c = 0; c < 4; ++c)
      for (int u = 0; u < 16; ++u) table[c][u] = (u / 8) * 16 + 4 * (c / 2 + 2 * (u % 2)) + (u % 8) / 2;
    return table;
  }();
  __m512i order[4];
  for (int c = 0; c < 4; ++c) order[c] = _mm512_load_si512(lanes[c].data());
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x88));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i halves = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // shift the upper half by 4
  __m512 out[R][4 * H];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4 * H; ++c) out[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t g0 = g * block, g1 = std::min(K, g0 + block);
    __m512i acc[R][4 * H];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4 * H; ++j) acc[r][j] = _mm512_setzero_si512();
    for (int64_t k = g0; k < g1; k += 4) {
      __m512i xs[R];
      for (int r = 0; r < R; ++r) {
        int32_t quad;
        std::memcpy(&quad, xq.At(m0 + r, k, block), 4);
        xs[r] = _mm512_set1_epi32(quad);
      }
      for (int i = 0; i < 4; ++i) {
        const int8_t* bytes = w + (k + i) * packed + n0 / 2;
        _mm_prefetch(reinterpret_cast<const char*>(bytes + kAhead * packed), _MM_HINT_T1);
        if (H == 2) _mm_prefetch(reinterpret_cast<const char*>(bytes + kAhead * packed + 63), _MM_HINT_T1);
      }
      for (int h = 0; h < H; ++h) {
        __m512i rows[4];
        for (int i = 0; i < 4; ++i) {
          const __m256i row = k + i < g1 ? _mm256_maskz_loadu_epi8(loaded[h], w + (k + i) * packed + n0 / 2 + 32 * h)
                                         : _mm256_setzero_si256();
          const __m512i both = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(row), row, 1), flip);
          rows[i] = _mm512_and_si512(_mm512_srlv_epi16(both, halves), nibble);
        }
        const __m512i ab_lo = _mm512_unpacklo_epi8(rows[0], rows[1]), ab_hi = _mm512_unpackhi_epi8(rows[0], rows[1]);
        const __m512i cd_lo = _mm512_unpacklo_epi8(rows[2], rows[3]), cd_hi = _mm512_unpackhi_epi8(rows[2], rows[3]);
        const __m512i quads[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
                                  _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < 4; ++j) acc[r][4 * h + j] = _mm512_dpbusd_epi32(acc[r][4 * h + j], quads[j], xs[r]);
      }
    }
    for (int h = 0; h < H; ++h) {
      __m512 scale[4];
      __m512i zero[4];  // z + 8: the zero point and the 8 added to make q unsigned
      for (int c = 0; c < 4; ++c) {
        const int64_t column = n0 + 64 * h + 16 * c;
        scale[c] = _mm512_maskz_loadu_ps(parts[4 * h + c], s + g * N + column);
        zero[c] = _mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(parts[4 * h + c], z + g * N + column)),
                                   _mm512_set1_epi32(8));
      }
      for (int r = 0; r < R; ++r) {
        const __m512i sum = _mm512_set1_epi32(xq.sums[(m0 + r) * G + g]);
        const __m512 d = _mm512_set1_ps(xq.d[(m0 + r) * G + g]);
        const __m512i* a = acc[r] + 4 * h;
        for (int c = 0; c < 4; ++c) {
          const __m512i dot = _mm512_permutex2var_epi32(a[2 * (c % 2)], order[c], a[2 * (c % 2) + 1]);
          const __m512i exact = _mm512_sub_epi32(dot, _mm512_mullo_epi32(zero[c], sum));
          out[r][4 * h + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(scale[c], d), out[r][4 * h + c]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4 * H; ++c) _mm512_mask_storeu_ps(y + (m0 + r) * N + n0 + 16 * c, parts[c], out[r][c]);
}

// y[m0:m0+R, n0:n0+J] of the transposed product, w^T (N, ceil(K / 2)): a
// row's bytes hold consecutive inputs, the low nibble the even one, so the
// low nibbles of 64 bytes meet the activations' 64 even inputs lane for
// lane (ae), the high ones the odd inputs (ao), with no interleaving.
template <int R, int J>
void Int4NkTile(const int8_t* ae, const int8_t* ao, int64_t Kh, const QuantizedRows& xq, const int8_t* w,
                         const float* s, const int8_t* z, float* y, int64_t K, int64_t N, int64_t G, int64_t block,
                         int64_t m0, int64_t n0) {
  const int64_t packed = (K + 1) / 2;
  const int outputs = static_cast<int>(std::min<int64_t>(J, N - n0));
  const int8_t* rows[J];  // past N, row n0 again (its sums are not stored)
  for (int j = 0; j < J; ++j) rows[j] = w + (n0 + (j < outputs ? j : 0)) * packed;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x88));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 out[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) out[r][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b0 = g * block / 2, b1 = std::min(packed, (g + 1) * block / 2);
    __m512i acc[R][J];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_si512();
    for (int64_t b = b0; b < b1; b += 64) {
      const __mmask64 loaded = b1 - b >= 64 ? ~0ULL : (1ULL << (b1 - b)) - 1;
      __m512i even[R], odd[R];
      for (int r = 0; r < R; ++r) {
        even[r] = _mm512_maskz_loadu_epi8(loaded, ae + (m0 + r) * Kh + b);
        odd[r] = _mm512_maskz_loadu_epi8(loaded, ao + (m0 + r) * Kh + b);
      }
      for (int j = 0; j < J; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[j] + J * packed + b), _MM_HINT_T0);  // the next tile's row
        const __m512i bytes = _mm512_xor_si512(_mm512_maskz_loadu_epi8(loaded, rows[j] + b), flip);
        const __m512i low = _mm512_and_si512(bytes, nibble);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
        for (int r = 0; r < R; ++r)
          acc[r][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r][j], low, even[r]), high, odd[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float d = xq.d[(m0 + r) * G + g];
      for (int j = 0; j < J; ++j)
        out[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][j]),
                                    _mm512_set1_ps(s[(n0 + (j < outputs ? j : 0)) * G + g] * d), out[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < outputs; ++j) {
      float zeros = 0.0f;  // sum_g d s (z + 8) (the group's sum of a)
      for (int64_t g = 0; g < G; ++g)
        zeros += xq.d[(m0 + r) * G + g] * s[(n0 + j) * G + g] *
                 static_cast<float>((z[(n0 + j) * G + g] + 8) * xq.sums[(m0 + r) * G + g]);
      y[(m0 + r) * N + n0 + j] = _mm512_reduce_add_ps(out[r][j]) - zeros;
    }
}

// The kInt4Columns columns of a unit from n0, all rows: up to 2 rows of x
// in one visit of w's rows, more in two (their accumulators would not fit
// in registers).
void Int4Unit(const QuantizedRows& xq, const int8_t* w, const float* s, const int8_t* z, float* y, int64_t M,
                       int64_t K, int64_t N, int64_t G, int64_t block, int64_t n0) {
  RowTiles(M, [&](auto rows, int64_t m0) {
    constexpr int R = decltype(rows)::value;
    if constexpr (R <= 2) {
      Int4Tile<R, 2>(xq, w, s, z, y, K, N, G, block, m0, n0);
    } else {
      Int4Tile<R, 1>(xq, w, s, z, y, K, N, G, block, m0, n0);
      if (n0 + 64 < N) Int4Tile<R, 1>(xq, w, s, z, y, K, N, G, block, m0, n0 + 64);
    }
  });
}

void Int4NkUnit(const int8_t* ae, const int8_t* ao, int64_t Kh, const QuantizedRows& xq, const int8_t* w,
                         const float* s, const int8_t* z, float* y, int64_t M, int64_t K, int64_t N, int64_t G,
                         int64_t block, int64_t n0) {
  RowTiles(M, [&](auto rows, int64_t m0) {
    constexpr int R = decltype(rows)::value, J = R <= 2 ? 4 : 2;
    for (int64_t n = n0; n < std::min(N, n0 + kColumns); n += J)
      Int4NkTile<R, J>(ae, ao, Kh, xq, w, s, z, y, K, N, G, block, m0, n);
  });
}

#else

// The same integer sums as plain loops.
void Int4Unit(const QuantizedRows& xq, const int8_t* w, const float* s, const int8_t* z, float* y, int64_t M,
                       int64_t K, int64_t N, int64_t G, int64_t block, int64_t n0) {
  const int64_t n1 = std::min(N, n0 + kInt4Columns), packed = (N + 1) / 2;
  for (int64_t m = 0; m < M; ++m) {
    float out[kInt4Columns] = {0};
    for (int64_t g = 0; g < G; ++g) {
      int32_t acc[kInt4Columns] = {0};
      for (int64_t k = g * block; k < std::min(K, (g + 1) * block); ++k) {
        const int32_t a = *xq.At(m, k, block);
        for (int64_t n = n0; n < n1; ++n) {
          const int8_t byte = w[k * packed + n / 2];
          acc[n - n0] += a * (n % 2 ? byte >> 4 : static_cast<int8_t>(byte << 4) >> 4);
        }
      }
      for (int64_t n = n0; n < n1; ++n)
        out[n - n0] = std::fma(static_cast<float>(acc[n - n0] - z[g * N + n] * xq.sums[m * G + g]),
                               s[g * N + n] * xq.d[m * G + g], out[n - n0]);
    }
    std::memcpy(y + m * N + n0, out, (n1 - n0) * sizeof(float));
  }
}

void Int4NkUnit(const int8_t* ae, const int8_t* ao, int64_t Kh, const QuantizedRows& xq, const int8_t* w,
                         const float* s, const int8_t* z, float* y, int64_t M, int64_t K, int64_t N, int64_t G,
                         int64_t block, int64_t n0) {
  const int64_t packed = (K + 1) / 2;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < std::min(N, n0 + kColumns); ++n) {
      float out = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t acc = 0;
        for (int64_t b = g * block / 2; b < std::min(packed, (g + 1) * block / 2); ++b) {
          const int8_t byte = w[n * packed + b];
          acc += ae[m * Kh + b] * (static_cast<int8_t>(byte << 4) >> 4) + ao[m * Kh + b] * (byte >> 4);
        }
        out = std::fma(static_cast<float>(acc - z[n * G + g] * xq.sums[m * G + g]), s[n * G + g] * xq.d[m * G + g], out);
      }
      y[m * N + n] = out;
    }
}

#endif

ffi::Error Int4Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> w,
                               ffi::Buffer<ffi::F32> s, ffi::Buffer<ffi::S8> z, ffi::ResultBuffer<ffi::F32> y,
                               int64_t block, bool transposed) {
  const auto xd = x.dimensions(), wd = w.dimensions(), sd = s.dimensions(), zd = z.dimensions(),
             yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || sd.size() != 2 || zd.size() != 2 || yd.size() != 2 || block < 1 ||
      (transposed && block % 2))
    return ffi::Error::InvalidArgument("int4_matmul: expected x (M, K), w (K, ceil(N / 2)) with s and z (G, N), "
                                       "or transposed w (N, ceil(K / 2)) with s and z (N, G), y (M, N), and a "
                                       "block >= 1 (even when transposed)");
  const int64_t M = xd[0], K = xd[1], N = yd[1], G = (K + block - 1) / block;
  const bool agree = transposed ? wd[0] == N && wd[1] == (K + 1) / 2 && sd[0] == N && sd[1] == G
                                : wd[0] == K && wd[1] == (N + 1) / 2 && sd[0] == G && sd[1] == N;
  if (!agree || sd[0] != zd[0] || sd[1] != zd[1] || yd[0] != M)
    return ffi::Error::InvalidArgument("int4_matmul: the shapes of x, w, s, z and y do not agree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const QuantizedRows xq = QuantizeGroups(x.typed_data(), M, K, block);
  const int8_t* ws = w.typed_data();
  const float* ss = s.typed_data();
  const int8_t* zs = z.typed_data();
  float* ys = y->typed_data();
  const int64_t units = (N + kColumns - 1) / kColumns;
  if (!transposed) {
    ParallelFor(pool, (N + kInt4Columns - 1) / kInt4Columns,
                [&](int64_t u) { Int4Unit(xq, ws, ss, zs, ys, M, K, N, G, block, u * kInt4Columns); });
    return ffi::Error::Success();
  }
  // The activations' even and odd inputs apart, as the nibbles of a byte hold them (zero past K).
  const int64_t Kh = (K + 1) / 2;
  std::vector<int8_t> even(M * Kh, 0), odd(M * Kh, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) (k % 2 ? odd : even)[m * Kh + k / 2] = *xq.At(m, k, block);
  ParallelFor(pool, units, [&](int64_t u) {
    Int4NkUnit(even.data(), odd.data(), Kh, xq, ws, ss, zs, ys, M, K, N, G, block, u * kColumns);
  });
  return ffi::Error::Success();
}

// softmax(q k^T * scale, masked) v for a few queries over a cache: a
// decoding step's attention, one call instead of XLA's two small products
// and the softmax's kernels between them. q (B, g, R, D) holds the R query
// rows that share each of the g key/value heads (the heads of a group, then
// the T positions: row r is position r % T), key and value (B, g, S, D)
// or (B g, S, D) the cache as it is stored (U = B g units); mask (B, T, S),
// or (1, T, S) for every row, False where a query may not attend. A masked
// key's logit is kMaskedLogit, as in zoo.layers.attention, and a row with
// no key to attend to is 0. Work units are rows, so two threads share even
// one head's rows.
constexpr float kMaskedLogit = -1e9f;

// exp(x) for x <= 0 (a logit minus its row's maximum), to within 2 ulp:
// x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by its degree-6 Taylor
// polynomial, 2^n put into the exponent. Plain arithmetic in a loop the
// compiler vectorizes.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693145751953125f, x);
  r = std::fma(n, -1.428606765330187e-06f, r);
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<int32_t>(n) << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

#if defined(__AVX512F__)
// The lanes of each of 16 vectors summed in order: lane j of the result is
// ((v[j][0] + v[j][1]) + ...) + v[j][15], as the per-row loop below sums a
// logit's 16 partial sums. The 16 x 16 block is transposed in registers
// (64 shuffles), then its rows are added one after another.
inline __m512 SumEachOf16(const __m512* v) {
  __m512 t[16], r[16];
  for (int i = 0; i < 8; ++i) {  // each 128-bit block: [a0 b0 a1 b1] and [a2 b2 a3 b3] of a = v[2i], b = v[2i + 1]
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i)  // r[4i + m], each 128-bit block L: lane 4L + m of v[4i], ..., v[4i + 3]
    for (int m = 0; m < 4; ++m) {
      const __m512d a = _mm512_castps_pd(t[4 * i + m / 2]), b = _mm512_castps_pd(t[4 * i + 2 + m / 2]);
      r[4 * i + m] = _mm512_castpd_ps(m % 2 ? _mm512_unpackhi_pd(a, b) : _mm512_unpacklo_pd(a, b));
    }
  __m512 column[16];  // column[l], lane j: v[j][l]
  for (int m = 0; m < 4; ++m) {  // the 4 x 4 blocks of 128 bits of r[m], r[4 + m], r[8 + m], r[12 + m] transposed
    const __m512 u0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44), u1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xEE);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x44), u3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xEE);
    column[m] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    column[4 + m] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    column[8 + m] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    column[12 + m] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
  __m512 sum = column[0];
  for (int l = 1; l < 16; ++l) sum = _mm512_add_ps(sum, column[l]);
  return sum;
}

// x[0..n) (n >= 1), the logits of keys offset..offset + n - 1, replaced by
// their softmax with the per-row loop's numbers: the maximum,
// ExpNonPositive of each entry less it, each divided by their sum, the sum
// taken as that loop takes it (16 partial sums by key % 16, then in order).
inline void Softmax16(float* x, int64_t n, int64_t offset) {
  const int64_t whole = n - n % 16;
  __m512 top = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < whole; i += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(x + i));
  float maximum = _mm512_reduce_max_ps(top);
  for (int64_t i = whole; i < n; ++i) maximum = std::max(maximum, x[i]);
  for (int64_t i = 0; i < n; ++i) x[i] = ExpNonPositive(x[i] - maximum);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = -(offset % 16); i < n; i += 16) {  // lane l: the entries of keys = l mod 16
    const int64_t low = std::max<int64_t>(0, -i), high = std::min<int64_t>(16, n - i);
    const __mmask16 lanes = static_cast<__mmask16>(((1u << high) - 1) & ~((1u << low) - 1));
    sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(lanes, x + i));
  }
  alignas(64) float partial[16];
  _mm512_store_ps(partial, sum);
  float total = 0.0f;
  for (int j = 0; j < 16; ++j) total += partial[j];
  for (int64_t i = 0; i < n; ++i) x[i] /= total;
}

constexpr int64_t kAttentionRows = 8;  // the query rows that share each read of a key and a value

// q . key's 16 partial sums (lane j: the products of dimensions j, j + 16,
// ... in order), as the per-row loop below keeps them; D a multiple of 16.
inline __m512 PartialSums(const float* q, const float* key, int64_t D) {
  __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(key));
  for (int64_t d = 16; d < D; d += 16) sum = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(key + d), sum);
  return sum;
}

// The attention of n <= kAttentionRows query rows q (n, D) over one unit's
// keys and values (S, D), D a multiple of 16, into out (n, D); masks[i] is
// row i's (S,) mask. Each row reads only the keys from the first it may
// attend to through the last; the keys of all rows' span are read once,
// 16 at a time, their logits summed by SumEachOf16.
inline void AttendRows(const float* q, const float* keys, const float* values, const bool* const* masks, int64_t n,
                       int64_t S, int64_t D, float scale, float* out) {
  int64_t first[kAttentionRows], last[kAttentionRows];
  int64_t start = S, end = -1;
  for (int64_t i = 0; i < n; ++i) {
    first[i] = 0;
    while (first[i] < S && !masks[i][first[i]]) ++first[i];
    last[i] = S - 1;
    while (last[i] >= first[i] && !masks[i][last[i]]) --last[i];
    if (first[i] <= last[i]) {
      start = std::min(start, first[i]);
      end = std::max(end, last[i]);
    }
  }
  std::fill(out, out + n * D, 0.0f);
  if (end < start) return;
  const int64_t span = end + 1 - start;
  std::vector<float> logits(n * span);
  __m512 products[16];
  int64_t s = start;
  for (; s + 16 <= end + 1; s += 16)
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < 16; ++j) products[j] = PartialSums(q + i * D, keys + (s + j) * D, D);
      _mm512_storeu_ps(logits.data() + i * span + (s - start), SumEachOf16(products));
    }
  for (; s <= end; ++s)
    for (int64_t i = 0; i < n; ++i) {
      alignas(64) float partial[16];
      _mm512_store_ps(partial, PartialSums(q + i * D, keys + s * D, D));
      float logit = 0.0f;
      for (int j = 0; j < 16; ++j) logit += partial[j];
      logits[i * span + (s - start)] = logit;
    }
  for (int64_t i = 0; i < n; ++i) {
    float* row = logits.data() + i * span;
    if (last[i] < first[i]) {  // no key to attend to: 0
      std::fill(row, row + span, 0.0f);
      continue;
    }
    for (int64_t t = 0; t < span; ++t)
      row[t] = masks[i][start + t] ? row[t] * scale : kMaskedLogit;
    const int64_t lo = first[i] - start, hi = last[i] - start;
    std::fill(row, row + lo, 0.0f);
    std::fill(row + hi + 1, row + span, 0.0f);
    Softmax16(row + lo, hi + 1 - lo, first[i]);
  }
  for (s = start; s <= end; ++s) {
    const float* value = values + s * D;
    for (int64_t i = 0; i < n; ++i) {
      const float w = logits[i * span + (s - start)];
      if (w == 0.0f) continue;
      const __m512 ws = _mm512_set1_ps(w);
      float* o = out + i * D;
      for (int64_t e = 0; e < D; e += 16)
        _mm512_storeu_ps(o + e, _mm512_fmadd_ps(ws, _mm512_loadu_ps(value + e), _mm512_loadu_ps(o + e)));
    }
  }
}
#endif

ffi::Error CachedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> key,
                           ffi::Buffer<ffi::F32> value, ffi::Buffer<ffi::PRED> mask, ffi::ResultBuffer<ffi::F32> out,
                           float scale) {
  const auto qd = q.dimensions(), kd = key.dimensions(), vd = value.dimensions(), md = mask.dimensions();
  if (qd.size() != 4 || kd.size() < 3 || kd.size() > 4 || vd.size() != kd.size() || md.size() != 3)
    return ffi::Error::InvalidArgument("cached_attention: expected q (B, g, R, D), key and value (B, g, S, D) or "
                                       "(B g, S, D), mask (B or 1, T, S)");
  const int64_t B = qd[0], U = qd[0] * qd[1], R = qd[2], D = qd[3], Bm = md[0], T = md[1];
  const size_t rank = kd.size();
  const int64_t S = kd[rank - 2], key_units = rank == 4 ? kd[0] * kd[1] : kd[0];
  bool agree = key_units == U && kd[rank - 1] == D && md[2] == S && (Bm == B || Bm == 1) && T >= 1 && R % T == 0;
  for (size_t i = 0; i < rank; ++i) agree = agree && vd[i] == kd[i];
  if (!agree) return ffi::Error::InvalidArgument("cached_attention: the shapes of q, key, value and mask do not agree");
  if (U == 0 || R == 0 || D == 0) return ffi::Error::Success();
  const float* qs = q.typed_data();
  const float* ks = key.typed_data();
  const float* vs = value.typed_data();
  const bool* ms = mask.typed_data();
  float* os = out->typed_data();
  const int64_t heads = U / Bm;  // the units that share a row of the mask
#if defined(__AVX512F__)
  if (D % 16 == 0) {
    // kAttentionRows rows of a unit at a time, so that each key and value
    // is read from memory once for all of them.
    const int64_t blocks = (R + kAttentionRows - 1) / kAttentionRows;
    ParallelFor(pool, U * blocks, [&](int64_t task) {
      const int64_t u = task / blocks, r0 = task % blocks * kAttentionRows, n = std::min(kAttentionRows, R - r0);
      const bool* rows_mask[kAttentionRows];
      for (int64_t i = 0; i < n; ++i) rows_mask[i] = ms + ((u / heads) * T + (r0 + i) % T) * S;
      AttendRows(qs + (u * R + r0) * D, ks + u * S * D, vs + u * S * D, rows_mask, n, S, D, scale,
                 os + (u * R + r0) * D);
    });
    return ffi::Error::Success();
  }
#endif
  ParallelFor(pool, U * R, [&](int64_t unit) {
    const int64_t u = unit / R, r = unit % R;
    const float* qr = qs + unit * D;
    const float* ku = ks + u * S * D;
    const float* vu = vs + u * S * D;
    const bool* mr = ms + ((u / heads) * T + r % T) * S;
    float* o = os + unit * D;
    // Only the keys from the first a row may attend to through the last
    // are read: the cache past a step's position is masked, and a masked
    // key's weight (exp(-87) over a sum of at least 1) changes no output.
    int64_t first = 0, last = S - 1;
    while (first < S && !mr[first]) ++first;
    std::fill(o, o + D, 0.0f);
    if (first == S) return;
    while (!mr[last]) --last;
    std::vector<float> weights(S);
    for (int64_t s = first; s <= last; ++s) {
      float partial[16] = {0.0f};
      const float* kr = ku + s * D;
      int64_t d = 0;
      for (; d + 16 <= D; d += 16)
        for (int j = 0; j < 16; ++j) partial[j] += qr[d + j] * kr[d + j];
      for (; d < D; ++d) partial[d % 16] += qr[d] * kr[d];
      float logit = 0.0f;
      for (int j = 0; j < 16; ++j) logit += partial[j];
      weights[s] = mr[s] ? logit * scale : kMaskedLogit;
    }
    float maximum = weights[first];
    for (int64_t s = first + 1; s <= last; ++s) maximum = std::max(maximum, weights[s]);
    for (int64_t s = first; s <= last; ++s) weights[s] = ExpNonPositive(weights[s] - maximum);
    float partial[16] = {0.0f};
    for (int64_t s = first; s <= last; ++s) partial[s % 16] += weights[s];
    float total = 0.0f;
    for (int j = 0; j < 16; ++j) total += partial[j];
    for (int64_t s = first; s <= last; ++s) {
      const float w = weights[s] / total;
      if (w == 0.0f) continue;
      const float* vr = vu + s * D;
      for (int64_t e = 0; e < D; ++e) o[e] += w * vr[e];
    }
  });
  return ffi::Error::Success();
}

// The k largest entries of each row of x (R, V), in the order XLA's CPU
// TopK gives them: by the float's bits as a signed integer with the
// negative values' order reversed (so -0 below +0 and NaN above +inf),
// ties to the lower index. XLA sorts an index array partially through a
// heap for each row; here each row is read once, 16 entries at a time
// compared with the k-th best so far, and only those above it are put in
// the k best in order. Entries equal to the k-th best come later in the
// row, so they lose the tie and are skipped.
inline int32_t TopKey(uint32_t bits) {
  return static_cast<int32_t>(static_cast<int32_t>(bits) < 0 ? 0x7FFFFFFFu - bits : bits);
}

void TopKRow(const float* x, int64_t V, int64_t k, float* values, int32_t* indices) {
  int32_t keys[kTopKLargest];
  int64_t n = 0;
  const auto insert = [&](int32_t key, int32_t i) {
    if (n == k) {
      if (key <= keys[k - 1]) return;
      --n;
    }
    int64_t p = n++;
    for (; p > 0 && keys[p - 1] < key; --p) {
      keys[p] = keys[p - 1];
      indices[p] = indices[p - 1];
    }
    keys[p] = key;
    indices[p] = i;
  };
  int64_t v = 0;
#if defined(__AVX512F__)
  for (; v < V; v += 16) {
    const __mmask16 part = V - v >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (V - v)) - 1);
    const __m512i bits = _mm512_maskz_loadu_epi32(part, x + v);
    const __mmask16 negative = _mm512_movepi32_mask(bits);
    const __m512i key = _mm512_mask_sub_epi32(bits, negative, _mm512_set1_epi32(0x7FFFFFFF), bits);
    __mmask16 above = n < k ? part : _mm512_mask_cmpgt_epi32_mask(part, key, _mm512_set1_epi32(keys[k - 1]));
    if (!above) continue;
    alignas(64) int32_t chunk[16];
    _mm512_store_si512(chunk, key);
    for (; above; above &= above - 1) {
      const int lane = __builtin_ctz(above);
      insert(chunk[lane], static_cast<int32_t>(v + lane));
    }
  }
#else
  for (; v < V; ++v) {
    uint32_t bits;
    std::memcpy(&bits, x + v, sizeof bits);
    insert(TopKey(bits), static_cast<int32_t>(v));
  }
#endif
  for (int64_t j = 0; j < k; ++j) values[j] = x[indices[j]];
}

ffi::Error TopK(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> values,
                ffi::ResultBuffer<ffi::S32> indices) {
  const auto xd = x.dimensions(), vd = values->dimensions(), id = indices->dimensions();
  if (xd.size() != 2 || vd.size() != 2 || id.size() != 2)
    return ffi::Error::InvalidArgument("top_k: expected x (R, V), values and indices (R, k)");
  const int64_t R = xd[0], V = xd[1], k = vd[1];
  if (vd[0] != R || id[0] != R || id[1] != k || k < 1 || k > V || k > kTopKLargest)
    return ffi::Error::InvalidArgument("top_k: the shapes of x, values and indices do not agree, or k is not in [1, 64]");
  const float* xs = x.typed_data();
  float* vs = values->typed_data();
  int32_t* is = indices->typed_data();
  ParallelFor(pool, R, [&](int64_t r) { TopKRow(xs + r * V, V, k, vs + r * k, is + r * k); });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooInt4Matmul, Int4Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("block")
                                  .Attr<bool>("transposed"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooIntegerMatmul, IntegerMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<bool>("transposed"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooQuantizedMatmul, QuantizedMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("transposed")
                                  .Attr<float>("epsilon"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooFloatMatmul, FloatMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooFloatDense, FloatDense,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooTopK, TopK,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooCachedAttention, CachedAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale"));

// Whether this build multiplies with AVX512-VNNI (1) or plain loops (0).
extern "C" int ZooIntegerMatmulVnni() { return kVnni ? 1 : 0; }
