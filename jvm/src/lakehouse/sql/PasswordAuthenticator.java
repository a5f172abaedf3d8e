package lakehouse.sql;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The SQL server's check of who connects (HiveServer2's CUSTOM authentication): the one user
 * and password {@link #admit} read once, as the server starts, the password from the server's
 * environment, never its command line or a file. Read once, not at each login: HiveServer2
 * makes this class anew for each login, and nothing a client sends after the start may change
 * whom it admits.
 */
public final class PasswordAuthenticator implements PasswdAuthenticationProvider {
    static final String PASSWORD_ENV = "LAKEHOUSE_SQL_PASSWORD";

    private static volatile byte[] user;
    private static volatile byte[] password;

    /** The user the server admits, with the password in its environment; once, at start. */
    public static synchronized void admit(String name) {
        String secret = System.getenv(PASSWORD_ENV);
        if (user != null) {
            throw new IllegalStateException("the SQL server's user is set once, at its start");
        }
        if (name == null || name.isEmpty() || secret == null || secret.isEmpty()) {
            throw new IllegalArgumentException("the SQL server needs a user and $" + PASSWORD_ENV);
        }
        password = bytes(secret);
        user = bytes(name);
    }

    @Override
    public void Authenticate(String name, String secret) throws AuthenticationException {
        byte[] expectedUser = user;
        byte[] expectedPassword = password;
        if (expectedUser == null || expectedPassword == null) {
            throw new AuthenticationException("the server has no user and password to admit");
        }
        // Both compared in full, in constant time: how far a guess matches is not told.
        boolean userMatches = MessageDigest.isEqual(expectedUser, bytes(name));
        boolean passwordMatches = MessageDigest.isEqual(expectedPassword, bytes(secret));
        if (!(userMatches && passwordMatches)) {
            throw new AuthenticationException("wrong user or password");
        }
    }

    private static byte[] bytes(String text) {
        return text == null ? new byte[0] : text.getBytes(StandardCharsets.UTF_8);
    }
}
