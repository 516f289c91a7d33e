"""Count lines, words and characters of a file, read through the broker."""
import sandbox_ipc

client = sandbox_ipc.connect()


def count(params):
    text = client.fs.read(params["path"])
    return {
        "path": params["path"],
        "lines": text.count("\n"),
        "words": len(text.split()),
        "chars": len(text),
    }


client.serve(count)
