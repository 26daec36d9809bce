# SPDX-License-Identifier: MIT
# A byte-for-byte TCP-to-Unix-socket relay: PgJDBC cannot reach a Unix
# socket, and the throwaway cluster listens on nothing else, so the "direct"
# JDBC runs go through this (it adds nothing to the protocol).
#   relay.py PORTFILE UNIX_SOCKET_PATH: listens on 127.0.0.1 at a port the
#   kernel picks, writes it to PORTFILE, relays until killed.
import asyncio
import os
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def main():
    portfile, path = sys.argv[1], sys.argv[2]

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_unix_connection(path)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter), pipe(sreader, cwriter))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with open(portfile + ".tmp", "w") as f:
        f.write(f"{port}\n")
    os.rename(portfile + ".tmp", portfile)
    async with server:
        await server.serve_forever()


asyncio.run(main())
