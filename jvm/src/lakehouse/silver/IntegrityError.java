package lakehouse.silver;

/**
 * Raised under the {@code fail} policy; its message is the one line the job prints, named as
 * the Python machine's {@code IntegrityError} is.
 */
public final class IntegrityError extends RuntimeException {
  public IntegrityError(String message) {
    super(message);
  }
}
