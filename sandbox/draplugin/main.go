// SPDX-License-Identifier: GPL-3.0-or-later

// gpu-kubelet-plugin: the kubegpu SANDBOX STAND-IN for NVIDIA's DRA GPU kubelet plugin
// (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin). Not NVIDIA's software: written for the sandbox
// from what NVIDIA's plugin does (sandbox/draplugin/README.md). It reads the node's NVML (the sandbox's fake NVML,
// from the driver root the DaemonSet mounts at /driver-root), publishes one ResourceSlice pool for its node through
// the kubelet-plugin helper of k8s.io/dynamic-resource-allocation, with NVIDIA's device names and attributes, and
// answers NodePrepareResources with a per-claim CDI spec made by the toolkit's nvcdi library, as NVIDIA's plugin does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/Masterminds/semver/v3"
	nvdevice "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/spec"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// cmd/gpu-kubelet-plugin/main.go DriverName; cdi.go cdiVendor, cdiClaimClass, defaultCDIRoot
	driverName    = "gpu.nvidia.com"
	cdiVendor     = "k8s." + driverName
	cdiClaimClass = "claim"
	// deviceinfo.go GpuDeviceType
	gpuDeviceType = "gpu"
	standinNote   = "kubegpu sandbox stand-in for NVIDIA's DRA GPU kubelet plugin (gpu-kubelet-plugin), not NVIDIA's software"
)

// version is set at build time (-X main.version=v0.5.0), the image tag it stands in for
var version = "unknown"

type gpu struct {
	minor  int
	uuid   string
	device resourceapi.Device
}

type plugin struct {
	mu     sync.Mutex
	gpus   map[string]*gpu // by device name (gpu-<minor>)
	nvcdi  nvcdi.Interface
	cdi    string // CDI_ROOT
	driver string // the driver root in this container (/driver-root)
	host   string // the driver root on the node (NVIDIA_DRIVER_ROOT)
	helper *kubeletplugin.Helper
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	klog.InitFlags(nil)
	flag.Parse()
	klog.Infof("%s; stands in for %s", standinNote, version)
	if err := run(); err != nil {
		klog.Errorf("gpu-kubelet-plugin: %v", err)
		os.Exit(1)
	}
}

func run() error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("NODE_NAME is not set")
	}
	p := &plugin{
		gpus:   map[string]*gpu{},
		cdi:    env("CDI_ROOT", "/var/run/cdi"),
		driver: env("CONTAINER_DRIVER_ROOT", "/driver-root"),
		host:   env("NVIDIA_DRIVER_ROOT", "/"),
	}
	hook := env("NVIDIA_CDI_HOOK_PATH", "/usr/bin/nvidia-cdi-hook")
	lib, err := fakeNVMLFiles(p.driver)
	if err != nil {
		return err
	}
	nvmllib := nvml.New(nvml.WithLibraryPath(lib))
	if ret := nvmllib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML init (%s): %v", lib, ret)
	}
	devlib := nvdevice.New(nvmllib)
	devices, err := p.enumerate(nvmllib, devlib)
	if err != nil {
		return err
	}
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	// as cdi.go NewCDIHandler: mode nvml, vendor k8s.gpu.nvidia.com, class claim, the driver root in this container
	p.nvcdi, err = nvcdi.New(
		nvcdi.WithDeviceLib(devlib),
		nvcdi.WithDriverRoot(p.driver),
		nvcdi.WithDevRoot(p.driver),
		nvcdi.WithLogger(logger),
		nvcdi.WithNvmlLib(nvmllib),
		nvcdi.WithMode("nvml"),
		nvcdi.WithVendor(cdiVendor),
		nvcdi.WithClass(cdiClaimClass),
		nvcdi.WithNVIDIACDIHookPath(hook),
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	)
	if err != nil {
		return fmt.Errorf("unable to create CDI library for claims: %w", err)
	}
	client, err := kubeClient(p.driver)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	plugins := env("KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins")
	// the plugin's own directory there and the CDI root (main.go: os.MkdirAll of both before the helper starts)
	for _, dir := range []string{filepath.Join(plugins, driverName), p.cdi} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	p.helper, err = kubeletplugin.Start(ctx, p,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.DriverName(driverName),
		kubeletplugin.RegistrarDirectoryPath(env("KUBELET_REGISTRAR_DIRECTORY_PATH", "/var/lib/kubelet/plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(plugins, driverName)),
	)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer p.helper.Stop()
	// one pool, named after the node, one slice with every full GPU (driver.go publishes a pool per node)
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := p.helper.PublishResources(ctx, resources); err != nil {
		return fmt.Errorf("publish resources: %w", err)
	}
	klog.Infof("published %d devices in pool %s of driver %s", len(devices), node, driverName)
	if port := env("HEALTHCHECK_PORT", ""); port != "" && port != "-1" {
		go serveHealth(ctx, port)
	}
	<-ctx.Done()
	klog.Info("stopping")
	return nil
}

// fakeNVMLFiles: the node's libnvidia-ml.so.1 under the driver root, and what the sandbox's fake NVML reads linked
// into this container at the paths where it reads them (sandbox/draplugin/README.md: on a real node that is the
// kernel module, which every container shares). The fake's links beside the library (kubegpu-fake-nvml-*.so.<v>,
// sandbox/fakenvml/driver_files.py) name those paths; each is linked to the same path under the driver root.
func fakeNVMLFiles(root string) (string, error) {
	libdir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	lib := filepath.Join(libdir, "libnvidia-ml.so.1")
	if _, err := os.Stat(lib); err != nil {
		return "", fmt.Errorf("no NVML in the driver root %s: %w", root, err)
	}
	links, _ := filepath.Glob(filepath.Join(libdir, "kubegpu-fake-nvml-*"))
	for _, link := range links {
		target, err := os.Readlink(link)
		if err != nil || !filepath.IsAbs(target) {
			continue
		}
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return "", err
		}
		if err := os.Symlink(filepath.Join(root, target), target); err != nil {
			return "", err
		}
		klog.V(2).Infof("sandbox: %s -> %s (the fake NVML's file)", target, filepath.Join(root, target))
	}
	// the fake links libjansson, which a real NVML does not need: load it first from the driver root
	if jansson, _ := filepath.Glob(filepath.Join(libdir, "libjansson.so.4")); len(jansson) == 1 {
		if err := dl.New(jansson[0], dl.RTLD_NOW|dl.RTLD_GLOBAL).Open(); err != nil {
			return "", fmt.Errorf("load %s: %w", jansson[0], err)
		}
	}
	return lib, nil
}

// kubeClient: $KUBECONFIG, else the pod's service account, as NVIDIA's plugin. On a sandbox kubelet node (its
// /etc/default/kubelet says so, written by sandbox/kubelet/node.py) the kubernetes Service cannot be reached (no
// kube-proxy): there the node's own kubelet credentials (/etc/kubernetes/kubelet.conf under the driver root, the
// node's /), which the Node authorizer and NodeRestriction let manage this node's ResourceSlices and read the claims
// of its pods.
func kubeClient(root string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	kubeletConf := filepath.Join(root, "etc/kubernetes/kubelet.conf")
	switch path := os.Getenv("KUBECONFIG"); {
	case path != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	case sandboxNode(root):
		klog.Infof("sandbox: a kubelet node of the kubegpu sandbox (no Service network); using the node's kubelet credentials %s", kubeletConf)
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeletConf)
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kube client config: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

func sandboxNode(root string) bool {
	data, err := os.ReadFile(filepath.Join(root, "etc/default/kubelet"))
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(root, "etc/kubernetes/kubelet.conf"))
	return err == nil && strings.Contains(string(data), "written by sandbox/kubelet/node.py")
}

// enumerate: every full GPU as nvlib.go enumerateGpusAndMigDevices / getGpuInfo and deviceinfo.go GetDevice make it
func (p *plugin) enumerate(nvmllib nvml.Interface, devlib nvdevice.Interface) ([]resourceapi.Device, error) {
	driverVersion, ret := nvmllib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("error getting driver version: %v", ret)
	}
	cudaInt, ret := nvmllib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("error getting CUDA driver version: %v", ret)
	}
	cudaDriverVersion := fmt.Sprintf("%v.%v", cudaInt/1000, (cudaInt%1000)/10)
	var out []resourceapi.Device
	err := devlib.VisitDevices(func(index int, d nvdevice.Device) error {
		minor, ret := d.GetMinorNumber()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting minor number for device %d: %v", index, ret)
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting UUID for device %d: %v", index, ret)
		}
		productName, ret := d.GetName()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting product name for device %d: %v", index, ret)
		}
		architecture, err := d.GetArchitectureAsString()
		if err != nil {
			return fmt.Errorf("error getting architecture for device %d: %w", index, err)
		}
		brand, err := d.GetBrandAsString()
		if err != nil {
			return fmt.Errorf("error getting brand for device %d: %w", index, err)
		}
		cc, err := d.GetCudaComputeCapabilityAsString()
		if err != nil {
			return fmt.Errorf("error getting CUDA compute capability for device %d: %w", index, err)
		}
		pciBusID, err := d.GetPCIBusID()
		if err != nil {
			return fmt.Errorf("error getting PCI bus ID for device %d: %w", index, err)
		}
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":                  {StringValue: ptr(gpuDeviceType)},
			"uuid":                  {StringValue: ptr(uuid)},
			"productName":           {StringValue: ptr(productName)},
			"brand":                 {StringValue: ptr(brand)},
			"architecture":          {StringValue: ptr(architecture)},
			"cudaComputeCapability": {VersionValue: ptr(semver.MustParse(cc).String())},
			"driverVersion":         {VersionValue: ptr(semver.MustParse(driverVersion).String())},
			"cudaDriverVersion":     {VersionValue: ptr(semver.MustParse(cudaDriverVersion).String())},
		}
		attr, err := deviceattribute.GetPCIBusIDAttribute(pciBusID)
		if err != nil {
			return fmt.Errorf("error getting PCI bus ID for device %d: %w", index, err)
		}
		attrs[attr.Name] = attr.Value
		if root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(pciBusID); err == nil {
			attrs[root.Name] = root.Value
		} else {
			klog.Warningf("error getting PCIe root for device %d, continuing without attribute: %v", index, err)
		}
		dev := resourceapi.Device{Name: fmt.Sprintf("gpu-%d", minor), Attributes: attrs}
		memory, ret := d.GetMemoryInfo()
		switch ret {
		case nvml.SUCCESS:
			dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(int64(memory.Total), resource.BinarySI)},
			}
		case nvml.ERROR_NOT_SUPPORTED:
			klog.Warningf("ignoring %v for getting memory info for device %d", ret, index)
		default:
			return fmt.Errorf("error getting memory info for device %d: %v", index, ret)
		}
		p.gpus[dev.Name] = &gpu{minor: minor, uuid: uuid, device: dev}
		out = append(out, dev)
		klog.Infof("GPU %d: %s %s (%s) %s", index, dev.Name, productName, uuid, pciBusID)
		return nil
	})
	return out, err
}

func ptr[T any](v T) *T { return &v }

// PrepareResourceClaims: per claim, the devices allocated to this driver on this node, one CDI spec file with a
// device per GPU named <claimUID>-gpu-<minor> (cdi.go CreateSpecFile, GetClaimDeviceName)
func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = p.prepare(claim)
	}
	return out, nil
}

func (p *plugin) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	common, err := p.nvcdi.GetCommonEdits()
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("failed to get common CDI spec edits: %w", err)}
	}
	var specs []cdispec.Device
	var result []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		g, ok := p.gpus[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: unknown device %s in pool %s", claim.UID, r.Device, r.Pool)}
		}
		devs, err := p.nvcdi.GetDeviceSpecsByID(g.uuid)
		if err != nil || len(devs) == 0 {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("unable to get device spec for %s: %v", g.uuid, err)}
		}
		d := devs[0]
		d.Name = fmt.Sprintf("%s-%s", claim.UID, r.Device)
		specs = append(specs, d)
		result = append(result, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{cdiparser.QualifiedName(cdiVendor, cdiClaimClass, d.Name)},
		})
	}
	s, err := spec.New(spec.WithVendor(cdiVendor), spec.WithClass(cdiClaimClass), spec.WithDeviceSpecs(specs),
		spec.WithEdits(*common.ContainerEdits))
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("failed to create CDI spec: %w", err)}
	}
	// cdi.go writeSpec: the driver root in this container becomes the node's
	err = transformroot.New(transformroot.WithRoot(p.driver), transformroot.WithTargetRoot(p.host),
		transformroot.WithRelativeTo("host")).Transform(s.Raw())
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("failed to transform driver root in CDI spec: %w", err)}
	}
	name := cdiapi.GenerateTransientSpecName(cdiVendor, cdiClaimClass, string(claim.UID))
	if err := s.Save(filepath.Join(p.cdi, name+".yaml")); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("write CDI spec: %w", err)}
	}
	klog.Infof("prepared claim %s/%s (%s): %s", claim.Namespace, claim.Name, claim.UID, cdiNames(result))
	return kubeletplugin.PrepareResult{Devices: result}
}

func cdiNames(devs []kubeletplugin.Device) string {
	var names []string
	for _, d := range devs {
		names = append(names, d.CDIDeviceIDs...)
	}
	return strings.Join(names, ",")
}

// UnprepareResourceClaims: the claim's spec file goes (cdi.go DeleteClaimSpecFile)
func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, claim := range claims {
		name := cdiapi.GenerateTransientSpecName(cdiVendor, cdiClaimClass, string(claim.UID))
		err := os.Remove(filepath.Join(p.cdi, name+".yaml"))
		if err != nil && !os.IsNotExist(err) {
			out[claim.UID] = err
			continue
		}
		out[claim.UID] = nil
		klog.Infof("unprepared claim %s (%s)", claim.String(), claim.UID)
	}
	return out, nil
}

func (p *plugin) HandleError(ctx context.Context, err error, msg string) {
	klog.Errorf("%s: %v", msg, err)
}

// serveHealth: the gRPC health service "liveness" the chart's startup and liveness probes ask (healthcheckPort)
func serveHealth(ctx context.Context, port string) {
	if _, err := strconv.Atoi(port); err != nil {
		klog.Errorf("HEALTHCHECK_PORT %q: %v", port, err)
		return
	}
	lis, err := net.Listen("tcp", ":"+port)
	if err != nil {
		klog.Errorf("health server: %v", err)
		return
	}
	server := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(server, h)
	go func() { <-ctx.Done(); server.Stop() }()
	_ = server.Serve(lis)
}
