// Command cri-capture runs emit.sh in a container through a CRI runtime's
// own API, as a kubelet would, and copies the log file the runtime wrote.
// It is how containerd-cri.log was captured (../README.md); Debian has no
// crictl. It is a module of its own, out of the aggregator's build.
//
// The pod uses the host's network (no CNI needed). The image must hold
// /bin/sh and /emit.sh; the runtime's sandbox (pause) image must be
// present too, since no registry is reachable.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	socket := flag.String("socket", "/run/containerd/containerd.sock", "the runtime's CRI socket")
	image := flag.String("image", "localhost/bb:latest", "the image that holds /bin/sh and /emit.sh")
	logDir := flag.String("logdir", "", "the pod's log directory (required; made if missing)")
	out := flag.String("out", "", "where to copy the container's log file (required)")
	flag.Parse()
	if *logDir == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*logDir, 0o755); err != nil {
		log.Fatal(err)
	}

	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	ctx := context.Background()

	v, err := rt.Version(ctx, &cri.VersionRequest{})
	if err != nil {
		log.Fatalf("Version: %v", err)
	}
	log.Printf("runtime %s %s, CRI %s", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)

	pod := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: "capture", Namespace: "default", Uid: "cri-capture"},
		LogDirectory: *logDir,
		// No Hostname: with the host's network the pod has the host's UTS
		// namespace, and runc refuses to set a hostname there.
		Linux: &cri.LinuxPodSandboxConfig{
			SecurityContext: &cri.LinuxSandboxSecurityContext{
				NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
			},
		},
	}
	rp, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: pod})
	if err != nil {
		log.Fatalf("RunPodSandbox: %v", err)
	}
	podID := rp.PodSandboxId
	log.Printf("pod %s", podID)
	defer func() {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
			log.Printf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
			log.Printf("RemovePodSandbox: %v", err)
		}
	}()

	const logPath = "emit/0.log" // under LogDirectory, as a kubelet names it
	rc, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: podID,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "emit"},
			Image:    &cri.ImageSpec{Image: *image},
			Command:  []string{"/bin/sh", "/emit.sh"},
			LogPath:  logPath,
			Linux:    &cri.LinuxContainerConfig{},
		},
		SandboxConfig: pod,
	})
	if err != nil {
		log.Printf("CreateContainer: %v", err)
		return
	}
	id := rc.ContainerId
	defer func() {
		if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
			log.Printf("RemoveContainer: %v", err)
		}
	}()
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id}); err != nil {
		log.Printf("StartContainer: %v", err)
		return
	}
	log.Printf("container %s started", id)

	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			log.Printf("ContainerStatus: %v", err)
			return
		}
		if s := st.Status; s.State == cri.ContainerState_CONTAINER_EXITED {
			log.Printf("container exited: code %d, reason %q, log %s", s.ExitCode, s.Reason, s.LogPath)
			break
		}
		if time.Now().After(deadline) {
			log.Printf("container still %v after 2 minutes", st.Status.State)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}

	data, err := os.ReadFile(filepath.Join(*logDir, logPath))
	if err != nil {
		log.Print(err)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		log.Print(err)
		return
	}
	fmt.Printf("%s: %d bytes\n", *out, len(data))
}
