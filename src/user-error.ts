// A failure the user can act on, and the exit codes every command shares:
// thrown by the CLI and by what it shares with the demo (the diagnosis runner).

/** Exit codes shared by all subcommands. */
export const EXIT_OK = 0;
/** diagnose: an active loopback was found. */
export const EXIT_FINDING = 1;
/** Usage errors, missing privileges, unreadable inputs. */
export const EXIT_ERROR = 2;

/** A failure the user can act on; message is printed as is. */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = EXIT_ERROR,
  ) {
    super(message);
    this.name = 'UserError';
  }
}
