"""launch_code_line: one line on the code a launch staged (the job_dir action's `code` result)."""


def launch_code_line(code):
    where = "copied to the NAS" if code["copied"] else "already on the NAS, not copied"
    line = f"code {code['hash']} ({code['files']} files) {where}"
    if code.get("git_commit"):
        line += f", git {code['git_commit'][:12]}{' with uncommitted changes' if code.get('git_dirty') else ''}"
    return line


class FilterModule:
    def filters(self):
        return {"launch_code_line": launch_code_line}
