// C++ allocation through new/delete (libstdc++ calls malloc and free, and
// aligned_alloc for over-aligned types): containers, strings, sized and
// aligned deletes. Prints figures that must match with and without kennel.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

struct alignas(64) Padded {
    std::uint64_t value[8];
};

int main() {
    std::map<int, std::string> ordered;
    std::unordered_map<std::string, std::vector<int>> hashed;
    for (int i = 0; i < 100000; i++) {
        ordered[i] = std::to_string(i * 7);
        hashed[std::to_string(i)].assign(i % 17, i);
    }
    std::vector<std::unique_ptr<Padded>> padded;
    for (int i = 0; i < 10000; i++) {
        padded.emplace_back(new Padded{});
        padded.back()->value[0] = i;
        if (reinterpret_cast<std::uintptr_t>(padded.back().get()) % 64 != 0) return 1;
    }
    long sum = 0;
    for (auto &p : padded) sum += p->value[0];
    for (auto &[k, v] : hashed) sum += v.size();
    auto *raw = new int[1000];
    delete[] raw;
    std::printf("%zu %zu %ld %s\n", ordered.size(), hashed.size(), sum, ordered[99999].c_str());
    return 0;
}
