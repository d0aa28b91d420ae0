# SPDX-License-Identifier: GPL-3.0-or-later
"""A TCP relay from the Docker bridge's gateway address to the API server on loopback.

The sandbox API server binds 127.0.0.1 only; kubelets in node containers reach the host at their bridge's gateway
(172.17.0.1 on Docker's default bridge). kube-apiserver takes one --bind-address, and 0.0.0.0 would listen on every
interface of this machine, so this relay listens on the gateway address alone and copies bytes both ways: TLS runs end
to end between the kubelet and the API server (the kubelet's client certificate reaches the API server as it is; the
kubelet checks the API server's certificate against the name ``kubernetes``, one of its SANs, through its kubeconfig's
tls-server-name). Run by sandbox-up (``python -m sandbox.kubelet.gateway``), recorded and stopped like every other
sandbox process.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError, RuntimeError):
            writer.close()


async def _relay(target_host: str, target_port: int, client_r, client_w) -> None:
    try:
        server_r, server_w = await asyncio.wait_for(asyncio.open_connection(target_host, target_port), 10)
    except (OSError, asyncio.TimeoutError) as exc:
        print("gateway: cannot reach %s:%d: %s" % (target_host, target_port, exc), file=sys.stderr, flush=True)
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))
    for writer in (client_w, server_w):
        writer.close()


async def serve(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    """Relay every connection to (listen_host, listen_port) to (target_host, target_port) until SIGTERM/SIGINT."""
    server = await asyncio.start_server(lambda r, w: _relay(target_host, target_port, r, w), listen_host, listen_port,
                                        reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("gateway: %s:%d -> %s:%d" % (listen_host, listen_port, target_host, target_port), flush=True)
    async with server:
        await stop.wait()
    print("gateway: stopped", flush=True)


def main(argv=None) -> int:
    """Command line: --listen HOST:PORT --to HOST:PORT."""
    parser = argparse.ArgumentParser(prog="python -m sandbox.kubelet.gateway", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on (the Docker bridge's gateway address)")
    parser.add_argument("--to", required=True, help="HOST:PORT to relay to (the API server on loopback)")
    args = parser.parse_args(argv)
    listen_host, listen_port = args.listen.rsplit(":", 1)
    to_host, to_port = args.to.rsplit(":", 1)
    if not to_host.startswith("127."):
        parser.error("--to must be a loopback address, not %s" % to_host)
    asyncio.run(serve(listen_host, int(listen_port), to_host, int(to_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
