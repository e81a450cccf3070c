#include "models/rope.h"

#include <cmath>

namespace gemlite {

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<float> inv_freq(half);
  const auto& scaling = config.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(double(config.rope_theta), 2.0 * i / config.head_dim);
    if (scaling.type == "llama3") {
      const double wavelen = 2 * M_PI / freq;
      const double low_freq_wavelen = scaling.original_max_position / scaling.low_freq_factor;
      const double high_freq_wavelen = scaling.original_max_position / scaling.high_freq_factor;
      if (wavelen > low_freq_wavelen) {
        freq /= scaling.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        freq = (1 - smooth) * freq / scaling.factor + smooth * freq;
      }
    }
    inv_freq[i] = float(freq);
  }
  return inv_freq;
}

}  // namespace gemlite
