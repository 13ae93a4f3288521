// A build without the CUDA toolkit: no devices; anything that needs one says why.
#include <stdexcept>

#include "cuda_device.h"

namespace crucible::eval::cuda {
namespace {
[[noreturn]] void absent() { throw std::runtime_error("this build of Crucible has no CUDA support"); }
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
DeviceInfo device_info(int) { absent(); }
void use_device(int) { absent(); }
CurrentDevice::CurrentDevice(int) { absent(); }
CurrentDevice::~CurrentDevice() = default;
void synchronize() { absent(); }
SharedDeviceMemory::~SharedDeviceMemory() = default;
void SharedDeviceMemory::reserve(std::size_t) { absent(); }
void SharedDeviceMemory::release() {}
std::array<uint8_t, 64> SharedDeviceMemory::ipc_handle() const { absent(); }
L2Flush::L2Flush(std::size_t) { absent(); }
L2Flush::~L2Flush() = default;
void L2Flush::run() { absent(); }
EventTimer::EventTimer() { absent(); }
EventTimer::~EventTimer() = default;
void EventTimer::start() { absent(); }
void EventTimer::stop() { absent(); }
double EventTimer::seconds() { absent(); }
HeldTimer::HeldTimer(double) { absent(); }
HeldTimer::~HeldTimer() = default;
void HeldTimer::start() { absent(); }
void HeldTimer::stop() { absent(); }
}  // namespace crucible::eval::cuda
