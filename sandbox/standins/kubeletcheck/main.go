// SPDX-License-Identifier: GPL-3.0-or-later

// kubeletcheck runs the kubelet's own device plugin code against a device plugin: the Registration server and the
// plugin client of k8s.io/kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1, at the sandbox's Kubernetes version
// (the version the kubelet nodes run). It serves <dir>/kubelet.sock, waits for one plugin to register (the kubelet's
// checks: API version, extended resource name; then it dials the plugin's endpoint), takes the plugin's first
// ListAndWatch answer, asks GetDevicePluginOptions, GetPreferredAllocation for -count of the listed devices and
// Allocate for the preferred ones, and prints what it got as one JSON document. The stand-in device plugin's tests
// (tests/sandbox/test_standin_deviceplugin.py) run it: the plugin is then spoken to by the kubelet's Go gRPC code and
// generated messages, not only by the Python test double.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

type handler struct {
	connected chan plugin.DevicePlugin
	lists     chan *api.ListAndWatchResponse
}

func (h *handler) CleanupPluginDirectory(klog.Logger, string) error { return nil }

func (h *handler) PluginConnected(_ context.Context, _ string, p plugin.DevicePlugin) error {
	h.connected <- p
	return nil
}

func (h *handler) PluginDisconnected(klog.Logger, string) {}

func (h *handler) PluginListAndWatchReceiver(_ klog.Logger, _ string, r *api.ListAndWatchResponse) {
	select {
	case h.lists <- r:
	default:
	}
}

type result struct {
	Resource      string                         `json:"resource"`
	Devices       []map[string]interface{}       `json:"devices"`
	PreferredOK   bool                           `json:"getPreferredAllocationAvailable"`
	Preferred     []string                       `json:"preferred"`
	Allocate      *api.ContainerAllocateResponse `json:"allocate,omitempty"`
	AllocateError string                         `json:"allocateError,omitempty"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kubeletcheck: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	dir := flag.String("dir", "", "the device plugin directory (absolute): kubelet.sock is served there")
	count := flag.Int("count", 1, "how many devices to ask GetPreferredAllocation and Allocate for")
	timeout := flag.Duration("timeout", 20*time.Second, "how long to wait for the plugin")
	flag.Parse()
	logger := klog.Background()
	h := &handler{connected: make(chan plugin.DevicePlugin, 1), lists: make(chan *api.ListAndWatchResponse, 1)}
	server, err := plugin.NewServer(logger, filepath.Join(*dir, "kubelet.sock"), h, h)
	if err != nil {
		fail("%v", err)
	}
	if err := server.Start(logger); err != nil {
		fail("%v", err)
	}
	defer server.Stop(logger) //nolint:errcheck
	deadline := time.After(*timeout)
	var p plugin.DevicePlugin
	select {
	case p = <-h.connected:
	case <-deadline:
		fail("no device plugin registered within %v", *timeout)
	}
	var list *api.ListAndWatchResponse
	select {
	case list = <-h.lists:
	case <-deadline:
		fail("no ListAndWatch answer within %v", *timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out := result{Resource: p.Resource()}
	var ids []string
	for _, d := range list.Devices {
		ids = append(ids, d.ID)
		out.Devices = append(out.Devices, map[string]interface{}{"id": d.ID, "health": d.Health, "topology": d.Topology})
	}
	options, err := p.API().GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil {
		fail("GetDevicePluginOptions: %v", err)
	}
	out.PreferredOK = options.GetPreferredAllocationAvailable
	preferred, err := p.API().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{ContainerRequests: []*api.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: ids, AllocationSize: int32(*count)}}})
	if err != nil {
		fail("GetPreferredAllocation: %v", err)
	}
	out.Preferred = preferred.ContainerResponses[0].DeviceIDs
	allocated, err := p.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: out.Preferred}}})
	if err != nil {
		out.AllocateError = err.Error()
	} else {
		out.Allocate = allocated.ContainerResponses[0]
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("%v", err)
	}
}
