// SPDX-License-Identifier: GPL-3.0-or-later
// The go-nvlib judge of the fake NVML (see README.md). The two NVIDIA versions below are the pins: rules.mk reads
// them from here to name the cache directory of the built binary.
module kubegpu.local/nvlibprobe

go 1.26.0

require (
	github.com/NVIDIA/go-nvlib v0.13.0
	github.com/NVIDIA/go-nvml v0.13.4-1
)

require github.com/google/uuid v1.6.0 // indirect
