// SPDX-License-Identifier: GPL-3.0-or-later

// nvlibprobe walks the GPUs through NVIDIA's go-nvml and go-nvlib the way NVIDIA's device plugin and GPU feature
// discovery (GFD) do, and prints what those libraries make of them as one JSON document on stdout.
//
// It is the judge of the fake libnvidia-ml.so.1 (sandbox/fakenvml): go-nvml loads the library with dlopen
// (RTLD_LAZY, as the plugin does) and binds every NVML entry point directly, so a function the library lacks ends
// the process with "symbol lookup error" (exit 127) on the first call. Every other failure is reported in the
// document, never fatal: a per-device NVML error is recorded as {"error": "<NVML return code name>"} and an error
// from go-nvlib as {"error": "<go-nvlib's message>"}.
//
// The calls follow the callers' paths (read in their sources; see sandbox/fakenvml/README.md, "Who calls what"):
//   - platform: go-nvlib pkg/nvlib/info ResolvePlatform (the plugin's device discovery strategy "auto");
//   - walk: go-nvlib pkg/nvlib/device VisitDevices and VisitMigDevices, as the plugin's internal/rm device map and
//     GFD's internal/resource manager walk the node (the first error ends their walk: it is reported as is);
//   - devices: every index on its own (DeviceGetHandleByIndex), so that one bad GPU does not hide the others, with
//     the fields the plugin and GFD read (name, UUID, minor number, memory, compute capability, PCI bus id, MIG mode,
//     fabric attachment) and per MIG device go-nvlib's profile name (MigDevice.GetProfile().String());
//   - events: the plugin's health check (internal/rm/health.go): one event set, each GPU registered for XID and
//     ECC events masked by what it supports, one wait with a zero timeout;
//   - topology: the plugin's aligned allocation (go-gpuallocator internal/links): the common PCIe ancestor of each
//     pair of GPUs and the NVLinks of each GPU;
//   - pci (only with NVLIBPROBE_PCI_DEVICES, a folder standing for /sys/bus/pci/devices): go-nvlib pkg/nvpci
//     GetGPUByPciBusID of each GPU's bus id, as GPU feature discovery reads a GPU's PCI class for gpu.mode
//     (internal/resource/nvml-device.go GetPCIClass; an error there makes GFD label gpu.mode=unknown).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/NVIDIA/go-nvlib/pkg/nvpci"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// obj keeps the JSON keys in a fixed order (encoding/json sorts map keys).
type obj map[string]interface{}

// returnNames are NVML's return codes by the names the fake's profiles use (NVML_ERROR_ without the prefix).
var returnNames = map[nvml.Return]string{
	nvml.SUCCESS:                         "SUCCESS",
	nvml.ERROR_UNINITIALIZED:             "UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT:          "INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED:             "NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:             "NO_PERMISSION",
	nvml.ERROR_ALREADY_INITIALIZED:       "ALREADY_INITIALIZED",
	nvml.ERROR_NOT_FOUND:                 "NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_SIZE:         "INSUFFICIENT_SIZE",
	nvml.ERROR_INSUFFICIENT_POWER:        "INSUFFICIENT_POWER",
	nvml.ERROR_DRIVER_NOT_LOADED:         "DRIVER_NOT_LOADED",
	nvml.ERROR_TIMEOUT:                   "TIMEOUT",
	nvml.ERROR_IRQ_ISSUE:                 "IRQ_ISSUE",
	nvml.ERROR_LIBRARY_NOT_FOUND:         "LIBRARY_NOT_FOUND",
	nvml.ERROR_FUNCTION_NOT_FOUND:        "FUNCTION_NOT_FOUND",
	nvml.ERROR_CORRUPTED_INFOROM:         "CORRUPTED_INFOROM",
	nvml.ERROR_GPU_IS_LOST:               "GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED:            "RESET_REQUIRED",
	nvml.ERROR_OPERATING_SYSTEM:          "OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH:   "LIB_RM_VERSION_MISMATCH",
	nvml.ERROR_IN_USE:                    "IN_USE",
	nvml.ERROR_MEMORY:                    "MEMORY",
	nvml.ERROR_NO_DATA:                   "NO_DATA",
	nvml.ERROR_VGPU_ECC_NOT_SUPPORTED:    "VGPU_ECC_NOT_SUPPORTED",
	nvml.ERROR_INSUFFICIENT_RESOURCES:    "INSUFFICIENT_RESOURCES",
	nvml.ERROR_FREQ_NOT_SUPPORTED:        "FREQ_NOT_SUPPORTED",
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "ARGUMENT_VERSION_MISMATCH",
	nvml.ERROR_DEPRECATED:                "DEPRECATED",
	nvml.ERROR_NOT_READY:                 "NOT_READY",
	nvml.ERROR_GPU_NOT_FOUND:             "GPU_NOT_FOUND",
	nvml.ERROR_INVALID_STATE:             "INVALID_STATE",
	nvml.ERROR_UNKNOWN:                   "UNKNOWN",
}

func codeName(ret nvml.Return) string {
	if name, ok := returnNames[ret]; ok {
		return name
	}
	return fmt.Sprintf("RETURN_%d", int(ret))
}

// nvmlValue is value when ret is SUCCESS, else the NVML error by name.
func nvmlValue(value interface{}, ret nvml.Return) interface{} {
	if ret != nvml.SUCCESS {
		return obj{"error": codeName(ret)}
	}
	return value
}

// libValue is value when err is nil, else go-nvlib's error text.
func libValue(value interface{}, err error) interface{} {
	if err != nil {
		return obj{"error": err.Error()}
	}
	return value
}

// stderrLogger satisfies go-nvlib's logger and keeps stdout for the JSON document.
type stderrLogger struct{}

func (stderrLogger) Debugf(string, ...interface{}) {}
func (stderrLogger) Infof(string, ...interface{})  {}
func (stderrLogger) Warningf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "warning: "+format+"\n", args...)
}

func probeMig(m device.MigDevice) obj {
	out := obj{}
	uuid, ret := m.GetUUID()
	out["uuid"] = nvmlValue(uuid, ret)
	name, ret := m.GetName()
	out["name"] = nvmlValue(name, ret)
	// The plugin and GFD name MIG resources after this string (GFD replaces '+' with '.').
	profile, err := m.GetProfile()
	if err != nil {
		out["profile"] = obj{"error": err.Error()}
	} else {
		info := profile.GetInfo()
		out["profile"] = profile.String()
		out["profile_ids"] = obj{"gpu_instance": info.GIProfileID, "compute_instance": info.CIProfileID,
			"engine": info.CIEngProfileID}
	}
	gi, ret := m.GetGpuInstanceId()
	out["gpu_instance_id"] = nvmlValue(gi, ret)
	ci, ret := m.GetComputeInstanceId()
	out["compute_instance_id"] = nvmlValue(ci, ret)
	attrs, ret := m.GetAttributes()
	out["attributes"] = nvmlValue(obj{
		"memory_mib": attrs.MemorySizeMB, "multiprocessors": attrs.MultiprocessorCount,
		"gpu_instance_slices": attrs.GpuInstanceSliceCount, "compute_instance_slices": attrs.ComputeInstanceSliceCount,
		"copy_engines": attrs.SharedCopyEngineCount, "decoders": attrs.SharedDecoderCount,
		"encoders": attrs.SharedEncoderCount, "jpegs": attrs.SharedJpegCount, "ofas": attrs.SharedOfaCount,
	}, ret)
	memory, ret := m.GetMemoryInfo()
	out["memory_total_bytes"] = nvmlValue(memory.Total, ret)
	return out
}

func probeDevice(lib nvml.Interface, devlib device.Interface, index int) obj {
	out := obj{"index": index}
	handle, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		out["handle"] = obj{"error": codeName(ret)}
		return out
	}
	d, err := devlib.NewDevice(handle)
	if err != nil {
		out["handle"] = obj{"error": err.Error()}
		return out
	}
	name, ret := d.GetName()
	out["name"] = nvmlValue(name, ret)
	uuid, ret := d.GetUUID()
	out["uuid"] = nvmlValue(uuid, ret)
	minor, ret := d.GetMinorNumber()
	out["minor_number"] = nvmlValue(minor, ret)
	memory, ret := d.GetMemoryInfo()
	out["memory_total_bytes"] = nvmlValue(memory.Total, ret)
	out["cuda_compute_capability"] = libValue(d.GetCudaComputeCapabilityAsString())
	out["architecture"] = libValue(d.GetArchitectureAsString())
	out["brand"] = libValue(d.GetBrandAsString())
	out["pci_bus_id"] = libValue(d.GetPCIBusID())
	pci, ret := d.GetPciInfo()
	out["pci_device_id"] = nvmlValue(fmt.Sprintf("0x%08X", pci.PciDeviceId), ret)
	out["mig_capable"] = libValue(d.IsMigCapable())
	out["mig_enabled"] = libValue(d.IsMigEnabled())
	out["fabric_attached"] = libValue(d.IsFabricAttached())
	out["coherent"] = libValue(d.IsCoherent())
	// go-nvlib's MIG profile names for this GPU (VisitMigProfiles through GetMigProfiles): what the plugin's
	// mixed strategy and mig-parted accept in a config; [] on a GPU that is not MIG capable.
	profiles, err := d.GetMigProfiles()
	if err != nil {
		out["mig_profiles"] = obj{"error": err.Error()}
	} else {
		names := []string{}
		for _, p := range profiles {
			names = append(names, p.String())
		}
		out["mig_profiles"] = names
	}
	var migs []interface{}
	err = d.VisitMigDevices(func(j int, m device.MigDevice) error {
		entry := probeMig(m)
		entry["slot"] = j
		migs = append(migs, entry)
		return nil
	})
	if migs == nil {
		migs = []interface{}{}
	}
	out["mig_devices"] = migs
	if err != nil {
		out["mig_error"] = err.Error()
	}
	return out
}

// probeWalk is go-nvlib's own walk of the node: it stops at the first error, as the plugin's does.
func probeWalk(devlib device.Interface) obj {
	var gpus []int
	err := devlib.VisitDevices(func(i int, d device.Device) error {
		gpus = append(gpus, i)
		return nil
	})
	walk := obj{"gpus": gpus}
	if err != nil {
		walk["error"] = err.Error()
	}
	var migs []string
	err = devlib.VisitMigDevices(func(i int, d device.Device, j int, m device.MigDevice) error {
		migs = append(migs, fmt.Sprintf("%d:%d", i, j))
		return nil
	})
	walk["mig_devices"] = migs
	if err != nil {
		walk["mig_error"] = err.Error()
	}
	if gpus == nil {
		walk["gpus"] = []int{}
	}
	if migs == nil {
		walk["mig_devices"] = []string{}
	}
	return walk
}

// probeEvents registers every reachable GPU as the plugin's health check does (internal/rm/health.go).
func probeEvents(lib nvml.Interface, count int) obj {
	out := obj{}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		out["create"] = obj{"error": codeName(ret)}
		return out
	}
	wanted := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
	var registered []interface{}
	for i := 0; i < count; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			registered = append(registered, obj{"error": codeName(ret)})
			continue
		}
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			registered = append(registered, obj{"error": codeName(ret)})
			continue
		}
		mask := supported & wanted
		ret = d.RegisterEvents(mask, set)
		registered = append(registered, nvmlValue(mask, ret))
	}
	if registered == nil {
		registered = []interface{}{}
	}
	out["registered"] = registered
	_, ret = set.Wait(0)
	out["wait"] = codeName(ret)
	out["free"] = codeName(set.Free())
	return out
}

// probeTopology reads what go-gpuallocator reads for the plugin's aligned allocation (internal/links/device.go).
func probeTopology(lib nvml.Interface, count int) obj {
	var handles []nvml.Device
	for i := 0; i < count; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret == nvml.SUCCESS {
			handles = append(handles, d)
		}
	}
	var pairs []interface{}
	for i, a := range handles {
		for j, b := range handles {
			if i == j {
				continue
			}
			level, ret := a.GetTopologyCommonAncestor(b)
			pairs = append(pairs, nvmlValue(int(level), ret))
		}
	}
	var links []interface{}
	for _, d := range handles {
		var remotes []interface{}
		for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
			state, ret := d.GetNvLinkState(link)
			if ret == nvml.ERROR_NOT_SUPPORTED {
				continue
			}
			if ret != nvml.SUCCESS {
				remotes = append(remotes, obj{"error": codeName(ret)})
				break
			}
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			pci, ret := d.GetNvLinkRemotePciInfo(link)
			remotes = append(remotes, nvmlValue(cString(pci.BusId[:]), ret))
		}
		if remotes == nil {
			remotes = []interface{}{}
		}
		links = append(links, remotes)
	}
	if pairs == nil {
		pairs = []interface{}{}
	}
	if links == nil {
		links = []interface{}{}
	}
	return obj{"common_ancestors": pairs, "nvlink_remotes": links}
}

// probePCI reads every reachable GPU's PCI device as GPU feature discovery does for gpu.mode, from root.
func probePCI(lib nvml.Interface, devlib device.Interface, count int, root string) []interface{} {
	pci := nvpci.New(nvpci.WithPCIDevicesRoot(root), nvpci.WithLogger(stderrLogger{}))
	out := []interface{}{}
	for i := 0; i < count; i++ {
		handle, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			out = append(out, obj{"error": codeName(ret)})
			continue
		}
		d, err := devlib.NewDevice(handle)
		if err != nil {
			out = append(out, obj{"error": err.Error()})
			continue
		}
		busID, err := d.GetPCIBusID()
		if err != nil {
			out = append(out, obj{"error": err.Error()})
			continue
		}
		gpu, err := pci.GetGPUByPciBusID(busID)
		switch {
		case err != nil:
			out = append(out, obj{"error": err.Error()})
		case gpu == nil:
			out = append(out, obj{"error": "not an NVIDIA GPU on the PCI bus"})
		default:
			out = append(out, obj{"address": gpu.Address, "class": fmt.Sprintf("0x%06x", gpu.Class),
				"numa_node": gpu.NumaNode, "bars": len(gpu.Resources), "driver": gpu.Driver})
		}
	}
	return out
}

func cString(chars []int8) string {
	var b strings.Builder
	for _, c := range chars {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func run() obj {
	lib := nvml.New()
	devlib := device.New(lib)
	report := obj{}
	infolib := info.New(info.WithNvmlLib(lib), info.WithDeviceLib(devlib), info.WithLogger(stderrLogger{}))
	report["platform"] = string(infolib.ResolvePlatform())

	ret := lib.Init()
	if ret != nvml.SUCCESS {
		report["init"] = codeName(ret)
		return report
	}
	report["init"] = "SUCCESS"
	defer lib.Shutdown()

	version, ret := lib.SystemGetDriverVersion()
	report["driver_version"] = nvmlValue(version, ret)
	cuda, ret := lib.SystemGetCudaDriverVersion()
	report["cuda_driver_version"] = nvmlValue(cuda, ret)
	nvmlVersion, ret := lib.SystemGetNVMLVersion()
	report["nvml_version"] = nvmlValue(nvmlVersion, ret)
	count, ret := lib.DeviceGetCount()
	report["count"] = nvmlValue(count, ret)
	if ret != nvml.SUCCESS {
		count = 0
	}
	report["walk"] = probeWalk(devlib)
	devices := []interface{}{}
	for i := 0; i < count; i++ {
		devices = append(devices, probeDevice(lib, devlib, i))
	}
	report["devices"] = devices
	report["events"] = probeEvents(lib, count)
	report["topology"] = probeTopology(lib, count)
	if root := os.Getenv("NVLIBPROBE_PCI_DEVICES"); root != "" {
		report["pci"] = probePCI(lib, devlib, count, root)
	}
	return report
}

func main() {
	out, err := json.Marshal(run())
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvlibprobe: %v\n", err)
		os.Exit(2)
	}
	fmt.Println(string(out))
}
